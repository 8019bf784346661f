// Package link is the self-healing multiplexed link between a sandbox's
// shim on the host (Host) and envd inside a gVisor sandbox (Guest).
//
// Under runsc the only way in that survives `runsc checkpoint` and
// `runsc restore` is PID 1's standard input, one end of a host socketpair
// (see package gvisor). A restore rewires that descriptor to a new socket
// whose host peer knows nothing of the old one, while the guest's memory,
// half-done reads included, comes back as it was: a yamux session in the
// middle of whatever it was doing, maybe in the middle of a frame. A fork
// restores one image several times, each to its own host; a shim may also
// restart. So both ends resynchronise on their own, and the guest never
// closes its end: it is the only link it will ever have.
//
// # Streams
//
// Once the link is up it carries one hashicorp/yamux session, the host
// being the client. Each stream the host opens starts with one byte, its
// channel (ChannelControl, ChannelAPI), then carries the bytes of one
// connection. Keepalives are off: a checkpointed guest is frozen, not
// dead, and an idle link sends nothing.
//
// # Handshake
//
// Every session epoch starts with a three-way handshake of text lines, each
// with a fresh nonce of 16 hex digits per attempt:
//
//	host                                              guest
//	 │── 0xFF × (12+256 KiB+1)   (flush, see below) ──▶│
//	 │── HUTCH-LINK <n1>\n  ───────────────────▶ (lost) │
//	 │   … no OK within 100 ms (backing off to 1 s)     │
//	 │── HUTCH-LINK <n2>\n  ──────────────────────────▶│ answers every HELLO
//	 │◀────────────────────────── HUTCH-LINK-OK <n2>\n ─│ remembers n2
//	 │── HUTCH-LINK-GO <n2>\n ────────────────────────▶│
//	 │── yamux (client) ◀───────────────────────────▶ yamux (server)
//
// The host starts yamux right after writing GO for its current nonce; the
// guest right after reading GO for the nonce it answered last. Why three
// ways: with two, a HELLO the host retried could reach the guest after its
// session began, and the session would read it as a yamux header. All the
// host's HELLOs precede its GO on the stream, so the guest has read every
// one of them before its session starts. Stale OK and GO lines, of older
// nonces, are ignored.
//
// Each end's scanner skips anything that is not a line it waits for: frames
// of a dead session, the flush, lines of older nonces. It looks for the
// message at the end of each line, so garbage without a newline before it
// does not hide it, and keeps at most 128 bytes of a line (then its last 32,
// more than the longest message).
//
// # Pumps and epochs
//
// One goroutine per end, the pump, reads the raw connection. It hands bytes
// to the scanner or to the current session, through an in-memory epoch:
// a pipe the session reads, and a write path to the raw connection that
// fails once the epoch has ended. So there is never a second reader to
// race for bytes that belong to the next epoch, an ended session can never
// write again (not even a frame it had queued), and no session ending ever
// closes the raw connection.
//
// The pumps follow yamux's framing (12-byte headers, a body after data
// headers). A byte at a frame boundary that cannot start a yamux header
// (version 0, a known type, a data length within the 256 KiB window), such
// as the 'H' of a new host's HELLO, ends the session at once, and that byte
// and the ones after it go to the scanner: the new host's lines are not lost
// in a dying session's buffers. Frames are written whole (a data header is
// held until its body comes), so an epoch ending never cuts one in two.
//
// Two refinements of the first design, each for a flaw:
//
//   - Flush. A guest restored in the middle of a frame would take the new
//     host's HELLOs as the rest of it: up to a whole window, hours of
//     retries. So the host opens each handshake with 0xFF bytes, one more
//     than a partial header and a full window: whatever state the guest's
//     session was in, a boundary falls inside the flush, where 0xFF is no
//     header. A request in flight across a restore may see filler as the
//     end of its body before its stream dies.
//   - Reset. When the guest's session ends while the host's may live on
//     (the guest read something that was not yamux, or yamux failed), the
//     guest writes HUTCH-LINK-RESET\n. At a boundary on the host this is no
//     header either, so the host's session ends too and it starts a new
//     handshake, instead of opening streams nobody will answer.
//
// # No host, new host
//
// On the guest, EOF or an error reading the raw connection means no host
// right now: it ends the session and reads again after 20 ms, backing off to
// 200 ms. After a restore the same descriptor brings the new host's bytes. On
// the host, the raw connection's end is the link's end: Dial and Wait fail
// with ErrClosed from then on.
package link

// EnvChannels is set, to the number of channels, in the environment of a
// process whose host sockets arrive over the link on its stdin (envd on
// the gvisor runtime): channel n is what descriptor 3+n would have been.
const EnvChannels = "HUTCH_LINK_CHANNELS"
