package osbexecd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	procpb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// A background command's output is kept in the sandbox, not by the host:
// no client reads it as it comes, so the host would otherwise take in
// every byte the command writes, on its own CPU, for nobody. The command
// writes its stdout and stderr (one file description, so their order is
// kept) into a FIFO; a keeper process started beside it, as root, copies
// the FIFO into numbered files of segment bytes each (file i holds bytes
// i*segment.. of the output) and keeps only the last two. The sandbox
// pays for both, on its own CPU and disk; the host reads the files through
// envd when GET /command/{id}/logs asks, from the client's cursor, at most
// two files' worth a request.
//
//	logRoot/<command id>/out     the FIFO (removed once both ends are open)
//	logRoot/<command id>/<i>     output bytes i*segment..(i+1)*segment-1
//
// The directories are root's (mode 711) and the files root's alone
// (0600): a command running as another user can open its own FIFO by name
// and nothing else there.

// logRoot is the sandbox directory of the background commands' output.
const logRoot = "/run/hutch-osb"

// keeperScript makes the command's directory ($1) and FIFO, owned by the
// user who writes it ($3), says "ready", then copies the FIFO into files
// of $2 bytes until every writer has closed it. The copy must write what
// it reads at once, for the logs to follow a command as it runs: GNU head
// buffers its output unless stdbuf says otherwise, BusyBox's dd counts
// bytes exactly without waiting for full blocks; a plain head is the last
// resort (its output shows in blocks). When a file cannot be written (the
// disk is full) the rest is drained, so that the command is not killed by
// a broken pipe.
const keeperScript = `set -e
umask 077
for t in mkfifo head wc rm; do
	command -v "$t" >/dev/null || { echo "the sandbox has no $t" >&2; exit 127; }
done
if stdbuf -o0 true 2>/dev/null; then
	copy() { stdbuf -o0 head -c "$1"; }
else
	case "$(dd --help 2>&1)" in
	*BusyBox*) copy() { dd bs=65536 count="$1" iflag=count_bytes 2>/dev/null; } ;;
	*) copy() { head -c "$1"; } ;;
	esac
fi
mkdir -p "${1%/*}"
chmod 711 "${1%/*}"
mkdir -m 711 "$1"
mkfifo "$1/out"
[ "$3" = root ] || chown "$3" "$1/out"
set +e
echo ready
exec <"$1/out" >/dev/null 2>&1
rm -f "$1/out"
i=0
while :; do
	copy "$2" >"$1/$i" || exec cat >/dev/null
	n=$(wc -c <"$1/$i")
	[ "$((n))" -lt "$2" ] && exit 0
	rm -f "$1/$((i-1))"
	i=$((i+1))
done`

// backgroundScript runs a background command ($2...) with its output on
// the FIFO $1. It replaces itself with the command, so that envd's
// process is the command: its signals and exit status are the command's
// own. /bin/bash falls back to /bin/sh where the image has none, as envd
// does for a command it starts.
const backgroundScript = `exec >"$1" 2>&1
shift
if [ "$1" = /bin/bash ] && [ ! -x /bin/bash ]; then shift; set -- /bin/sh "$@"; fi
exec "$@"`

// keeperGrace is how long after a command's end the host waits for its
// keeper to take the last of the output, before calling the command
// finished anyway (a process the command left running may hold the FIFO
// and keep writing; the keeper keeps its output too).
const keeperGrace = time.Second

// commandLog is where a background command's output is kept.
type commandLog struct {
	dir     string
	segment int64 // bytes per file

	// Guarded by sandboxState.mu.
	removed bool  // the files were removed, or are being
	end     int64 // the output's length when they were removed; -1 unknown
}

// keeperTag is envd's tag of command id's keeper.
func keeperTag(id string) string { return "osb-log-" + id }

// startKeeper starts cmd's keeper and waits until its FIFO is there, for
// a command run as user. The stream lives on ctx, the request's: the keeper goes on when its
// stream ends, and the host follows it no further (awaitKeeper looks again
// at the command's end).
func (h *Handler) startKeeper(ctx context.Context, c *call, cmd *command, user string) error {
	cfg := &procpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", keeperScript, "hutch-osb-log", cmd.log.dir, strconv.FormatInt(cmd.log.segment, 10), user}}
	p, err := startProcess(ctx, h.client(c, "root"), cfg, keeperTag(cmd.id), 0)
	if err != nil {
		return fmt.Errorf("keeping the output in the sandbox: %w", err)
	}
	defer p.cancel()
	defer p.stream.Close()
	var out strings.Builder
	for p.stream.Receive() {
		ev := p.stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil && out.Len() < maxHelperOutput {
			out.Write(d.GetStdout())
			out.Write(d.GetStderr())
			if out.String() == "ready\n" {
				return nil
			}
		}
		if ev.GetEnd() != nil {
			msg := strings.TrimSpace(out.String())
			if msg == "" {
				msg = ev.GetEnd().GetStatus()
			}
			return &apiError{http.StatusNotImplemented, codeNotSupported, "background commands keep their output in the sandbox, which needs /bin/sh with mkfifo, head and wc: " + msg}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err = p.stream.Err()
	if err == nil {
		err = errors.New("envd ended the stream before the keeper was ready")
	}
	return classify("keeping the output in the sandbox", err)
}

// dropKeeper ends cmd's keeper and removes its files, for a command that
// did not start.
func (h *Handler) dropKeeper(c *call, cmd *command) {
	ctx, cancel := context.WithTimeout(c.st.ctx, 10*time.Second)
	defer cancel()
	ec := h.client(c, "root")
	_ = ec.signal(ctx, keeperTag(cmd.id), procpb.Signal_SIGNAL_SIGKILL)
	_ = ec.remove(ctx, cmd.log.dir)
}

// awaitKeeper waits, at most keeperGrace, for cmd's keeper to end: the
// command has ended, and the keeper ends once it has taken the last of
// the output. A keeper whose FIFO nobody ever opened (the command failed
// before) is killed.
func (h *Handler) awaitKeeper(c *call, cmd *command) {
	ctx, cancel := context.WithTimeout(c.st.ctx, keeperGrace)
	defer cancel()
	ec := h.client(c, "root")
	req := connect.NewRequest(&procpb.ConnectRequest{Process: &procpb.ProcessSelector{Selector: &procpb.ProcessSelector_Tag{Tag: keeperTag(cmd.id)}}})
	ec.header(req.Header())
	stream, err := ec.process().Connect(ctx, req)
	if err != nil {
		return // gone already, or envd is
	}
	for stream.Receive() {
		if stream.Msg().GetEvent().GetEnd() != nil {
			stream.Close()
			return
		}
	}
	stream.Close()
	if c.st.ctx.Err() != nil {
		return
	}
	ctx, cancel = context.WithTimeout(c.st.ctx, 10*time.Second)
	defer cancel()
	if ok, _ := ec.exists(ctx, cmd.log.dir+"/out"); ok {
		_ = ec.signal(ctx, keeperTag(cmd.id), procpb.Signal_SIGNAL_SIGKILL)
	}
}

// removeLogs removes the files of cmds' output from the sandbox, noting
// how long each output was, for the logs to say what went.
func (h *Handler) removeLogs(ctx context.Context, c *call, cmds []*command) {
	// The listings below are the request's only ones: their share goes
	// back now, not when a foreground command this request starts ends
	// (review 30, H3).
	defer c.release()
	ec := h.client(c, "root")
	for _, cmd := range cmds {
		end := int64(-1)
		if segs, err := h.listSegments(ctx, ec, cmd.log); err == nil {
			end = segs.end
		}
		c.st.mu.Lock()
		cmd.log.end = end
		c.st.mu.Unlock()
		if err := ec.remove(ctx, cmd.log.dir); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			h.log.Info("background command's output not removed", "sandbox", c.id, "command", cmd.id, "err", err)
		}
	}
}

// segments is what the sandbox keeps of an output: files first..last,
// the output ending at end.
type segments struct {
	first, last int64
	end         int64
}

// listSegments finds the files kept of an output. Only the last two count;
// any older file is a leftover.
func (h *Handler) listSegments(ctx context.Context, ec *envdClient, lg *commandLog) (segments, error) {
	entries, err := ec.listDir(ctx, lg.dir, 1)
	if err != nil {
		return segments{}, err
	}
	sizes := map[int64]int64{}
	last := int64(-1)
	for _, e := range entries {
		i, err := strconv.ParseInt(e.GetName(), 10, 64)
		if err != nil || i < 0 || i > 1<<40 {
			continue
		}
		sizes[i] = e.GetSize()
		last = max(last, i)
	}
	if last < 0 {
		return segments{first: 0, last: -1, end: 0}, nil
	}
	s := segments{first: last, last: last, end: last*lg.segment + min(sizes[last], lg.segment)}
	if size, ok := sizes[last-1]; ok && size == lg.segment {
		s.first = last - 1
	}
	return s, nil
}

// readLogs returns cmd's output from byte offset cursor and the offset to
// ask from next. Output no longer kept is replaced by a note saying how
// much went.
func (h *Handler) readLogs(ctx context.Context, c *call, cmd *command, cursor int64) ([]byte, int64, error) {
	lg := cmd.log
	c.st.mu.Lock()
	removed, removedEnd := lg.removed, lg.end
	c.st.mu.Unlock()
	if removed {
		if removedEnd < 0 || cursor >= removedEnd {
			return nil, cursor, nil
		}
		return []byte(h.droppedNote(removedEnd - cursor)), removedEnd, nil
	}
	ec := h.client(c, "root")
	segs, err := h.listSegments(ctx, ec, lg)
	if errors.Is(err, errdefs.ErrNotFound) {
		return []byte(fmt.Sprintf("[hutch: the output of this command is no longer in the sandbox: %s is gone]\n", lg.dir)), cursor, nil
	}
	if err != nil {
		return nil, 0, err
	}
	cursor = min(cursor, segs.end)
	var out []byte
	if start := segs.first * lg.segment; cursor < start {
		out = append(out, h.droppedNote(start-cursor)...)
		cursor = start
	}
	for cursor < segs.end {
		i := cursor / lg.segment
		from, to := cursor-i*lg.segment, min(lg.segment, segs.end-i*lg.segment)
		b, err := ec.readRange(ctx, fmt.Sprintf("%s/%d", lg.dir, i), from, to)
		if errors.Is(err, errdefs.ErrNotFound) {
			// The keeper moved on since the listing.
			out = append(out, h.droppedNote(to-from)...)
			cursor += to - from
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		out = append(out, b...)
		cursor += int64(len(b))
		if int64(len(b)) < to-from {
			break // shorter than listed: someone in the sandbox cut it
		}
	}
	return out, cursor, nil
}

// droppedNote says n bytes of output are no longer kept.
func (h *Handler) droppedNote(n int64) string {
	return fmt.Sprintf("[hutch: %d bytes of earlier output were dropped; the sandbox keeps the last %d to %d bytes of a background command's output, for the last %d background commands]\n",
		n, h.opts.MaxCommandLog/2, h.opts.MaxCommandLog, h.keptLogs())
}

// keptLogs is how many background commands' outputs a sandbox keeps.
func (h *Handler) keptLogs() int { return max(1, h.opts.MaxSandboxLog/h.opts.MaxCommandLog) }

// readRange returns bytes from..to-1 of file path, fewer if it is shorter.
func (ec *envdClient) readRange(ctx context.Context, path string, from, to int64) ([]byte, error) {
	if to <= from {
		return nil, nil
	}
	h := http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", from, to-1)}}
	resp, err := ec.files(ctx, http.MethodGet, path, h, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusOK: // the whole file
		if _, err := io.CopyN(io.Discard, resp.Body, from); err != nil {
			return nil, nil
		}
	case http.StatusRequestedRangeNotSatisfiable:
		return nil, nil
	default:
		return nil, filesError("read "+path, resp)
	}
	b := make([]byte, to-from)
	n, err := io.ReadFull(resp.Body, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b[:n], nil
}
