package sandbox

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// A checkpoint (checkpoint.go) is a sandbox's memory and files on the data
// dir's disk, hundreds of MiB each; a sandbox paused into one holds no
// slot. Unbounded, one key filled the disk with create, fill, pause loops
// (review 23, F6). So a checkpoint is written only
//
//   - while the data dir's disk has room for it: about the sandbox's
//     memory in use and the files it wrote, above the floor every writer
//     of the template store keeps (template.RoomFor);
//   - for a pause, while the key has fewer sandboxes paused into one than
//     the caps on sandboxes paused with their memory (the same caps as
//     frozen ones: a key may have N running and N paused with their
//     memory, wherever that memory is). A count, not a byte quota: it
//     is what a native pause with memory is held to, and what a client
//     can see and act on (kill one, or pause without memory); the room
//     check bounds the bytes for the host.
//
// Checkpoints are written one at a time (the checkpointsOp lock), so the
// free space measured before one is there for it, and a count includes
// every pause recorded before. A refusal leaves nothing: the sandbox
// runs on, and the error matches errdefs.ErrResourceExhausted (429).

// checkpointsOp is the operation lock (lockOp) every checkpoint written
// holds; no sandbox id has a NUL.
const checkpointsOp = "\x00checkpoints"

// admitCheckpoint refuses a checkpoint of live sandbox sbx of keyID when
// the data dir's disk has no room for it, or, for a pause (pause true),
// when the key or the server is at its cap on sandboxes paused with their
// memory. The checkpointsOp lock is held.
func (m *Manager) admitCheckpoint(ctx context.Context, keyID, id string, sbx runtime.Sandbox, pause bool) error {
	if pause && (m.frozen.perKey > 0 || m.frozen.total > 0) {
		recs, err := m.store.AllSandboxes(ctx)
		if err != nil {
			return err
		}
		key, all := 0, 0
		for _, r := range recs {
			var info runtimeInfo
			if r.State != string(StatePaused) || json.Unmarshal([]byte(r.Runtime), &info) != nil || info.Checkpoint == "" {
				continue
			}
			all++
			if r.KeyID == keyID {
				key++
			}
		}
		if m.frozen.perKey > 0 && key >= m.frozen.perKey {
			return &LimitError{Limit: m.frozen.perKey, PerKey: true, Frozen: true}
		}
		if m.frozen.total > 0 && all >= m.frozen.total {
			return &LimitError{Limit: m.frozen.total, Frozen: true}
		}
	}
	return template.RoomFor(m.checkpoints, fmt.Sprintf("the checkpoint of sandbox %s (its memory and files)", id), checkpointSize(ctx, sbx))
}

// checkpointSize is about what a checkpoint of sbx takes on disk: the
// memory its processes use (the Sentry's, guest memory among it) and the
// files it wrote, which a checkpoint holds too.
func checkpointSize(ctx context.Context, sbx runtime.Sandbox) int64 {
	var n uint64
	if st, err := sbx.Stats(ctx); err == nil {
		n += st.MemoryUsed
	}
	if du, err := sbx.DiskUsage(ctx); err == nil {
		n += du.Used
	}
	return int64(n)
}
