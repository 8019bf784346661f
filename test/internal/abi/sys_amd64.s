#include "textflag.h"

// func int80(nr, a1, a2, a3, a4, a5, a6 uint32) int32
//
// The i386 system call entry from 64-bit code: the kernel treats it as a
// 32-bit process's call (seccomp sees AUDIT_ARCH_I386), with the
// arguments in ebx, ecx, edx, esi, edi and ebp.
TEXT ·int80(SB), NOSPLIT, $0-36
	MOVL nr+0(FP), AX
	MOVL a1+4(FP), BX
	MOVL a2+8(FP), CX
	MOVL a3+12(FP), DX
	MOVL a4+16(FP), SI
	MOVL a5+20(FP), DI
	MOVL a6+24(FP), R8
	PUSHQ BP
	MOVL R8, BP
	INT $0x80
	POPQ BP
	MOVL AX, ret+32(FP)
	RET
