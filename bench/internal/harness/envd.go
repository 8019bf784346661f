package harness

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	fspb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/api/gen/filesystem/filesystemconnect"
	pb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/api/gen/process/processconnect"
)

// FilesURL is envd's /files URL for path, under envd's base URL.
func FilesURL(base, path string) string {
	return base + "/files?" + url.Values{"path": {path}}.Encode()
}

// StartProcess is one commands.run as the E2B SDK does it: a Start stream
// of cfg (stdin false, Keepalive-Ping-Interval 50), timed from opening the
// stream to the end event (d) and to the start event (first). The stream
// is read to its end outside the timing, so that its connection is reused
// as the SDK's would be. A process that exits non-zero is an error.
func StartProcess(ctx context.Context, proc processconnect.ProcessClient, cfg *pb.ProcessConfig) (d, first time.Duration, err error) {
	return StartProcessAs(ctx, proc, cfg, "")
}

// StartProcessAs is StartProcess with an Authorization header, which
// selects envd's user ("Basic " + base64("<user>:")); "" sends none
// (envd's default user).
func StartProcessAs(ctx context.Context, proc processconnect.ProcessClient, cfg *pb.ProcessConfig, authorization string) (d, first time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req := connect.NewRequest(&pb.StartRequest{Process: cfg, Stdin: proto.Bool(false)})
	req.Header().Set("Keepalive-Ping-Interval", "50")
	if authorization != "" {
		req.Header().Set("Authorization", authorization)
	}
	t0 := time.Now()
	stream, err := proc.Start(ctx, req)
	if err != nil {
		return 0, 0, err
	}
	defer stream.Close()
	var end *pb.ProcessEvent_EndEvent
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().GetEvent().(type) {
		case *pb.ProcessEvent_Start:
			first = time.Since(t0)
		case *pb.ProcessEvent_End:
			d = time.Since(t0)
			end = ev.End
		}
	}
	if err := stream.Err(); err != nil {
		return 0, 0, err
	}
	switch {
	case first == 0:
		return 0, 0, errors.New("no start event")
	case end == nil:
		return 0, 0, errors.New("no end event")
	case end.GetExitCode() != 0:
		return 0, 0, fmt.Errorf("exit code %d: %s", end.GetExitCode(), end.GetError())
	}
	return d, first, nil
}

// UploadFile POSTs data to envd's fileURL (FilesURL) as the file's raw
// content (the SDKs' octet-stream upload, envd >= 0.5.7), timed until the
// reply is read.
func UploadFile(ctx context.Context, c *http.Client, fileURL string, data []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fileURL, bytes.NewReader(data))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	reply, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("upload: %s: %s", resp.Status, reply)
	}
	return d, nil
}

// DownloadFile GETs envd's fileURL (FilesURL), timed until its last byte
// is read (and decoded, when gz asks for gzip); the file must be size
// bytes.
func DownloadFile(ctx context.Context, c *http.Client, fileURL string, size int64, gz bool) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fileURL, nil)
	if err != nil {
		return 0, err
	}
	if gz {
		req.Header.Set("Accept-Encoding", "gzip, deflate")
	}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return 0, fmt.Errorf("download: %s: %s", resp.Status, msg)
	}
	var body io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return 0, err
		}
		body = zr
	} else if gz {
		return 0, fmt.Errorf("asked for gzip, got Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	n, err := io.CopyBuffer(io.Discard, body, make([]byte, 256<<10))
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if n != size {
		return 0, fmt.Errorf("download: got %d bytes, want %d", n, size)
	}
	return d, nil
}

// EnvdTimer times envd's round trips on one sandbox through Client, whose
// transport adds whatever the route needs (headers, token).
type EnvdTimer struct {
	Client *http.Client
	Base   string // envd's URL, or the server's that routes to it
	proc   processconnect.ProcessClient
	fs     filesystemconnect.FilesystemClient
}

// NewEnvdTimer is an EnvdTimer of envd at base through hc.
func NewEnvdTimer(hc *http.Client, base string) *EnvdTimer {
	return &EnvdTimer{Client: hc, Base: base, proc: processconnect.NewProcessClient(hc, base),
		fs: filesystemconnect.NewFilesystemClient(hc, base)}
}

// Health is envd's GET /health (204, no body), timed.
func (e *EnvdTimer) Health(ctx context.Context) (time.Duration, error) {
	return TimedGet(ctx, e.Client, e.Base+"/health", nil, http.StatusNoContent)
}

// TimedGet is one GET of url through c with header, timed from sending it
// to its body read whole; an answer other than want is an error.
func TimedGet(ctx context.Context, c *http.Client, url string, header http.Header, want int) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != want {
		return 0, fmt.Errorf("GET %s: %s", req.URL.Path, resp.Status)
	}
	return d, nil
}

// Stat is the Connect call filesystem.Filesystem/Stat of /tmp, timed.
func (e *EnvdTimer) Stat(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	_, err := e.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/tmp"}))
	return time.Since(t0), err
}

// Run is process.Process/Start of /bin/true to its end event, timed.
func (e *EnvdTimer) Run(ctx context.Context) (time.Duration, error) {
	d, _, err := StartProcess(ctx, e.proc, &pb.ProcessConfig{Cmd: "/bin/true"})
	return d, err
}
