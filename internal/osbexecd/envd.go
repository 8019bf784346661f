package osbexecd

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	fspb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/api/gen/filesystem/filesystemconnect"
	procpb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/api/gen/process/processconnect"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// envdBase is the URL the clients use; the transport ignores its host.
const envdBase = "http://envd"

// maxListingBytes bounds one ListDir answer (a search of a large tree),
// which arrives as one message.
const maxListingBytes = 64 << 20

// envdClient makes one request's calls to a sandbox's envd, as one of its
// users.
type envdClient struct {
	e    Envd
	user string
	http *http.Client
	c    *call // the request it serves, for the shares it holds
}

// client returns a client for c's sandbox acting as user ("" is
// Options.User).
func (h *Handler) client(c *call, user string) *envdClient {
	if user == "" {
		user = h.opts.User
	}
	return &envdClient{e: c.envd, user: user, http: &http.Client{Transport: c.envd.Transport}, c: c}
}

// as returns a client for the same sandbox acting as user.
func (ec *envdClient) as(user string) *envdClient {
	return &envdClient{e: ec.e, user: user, http: ec.http, c: ec.c}
}

func (ec *envdClient) header(h http.Header) {
	if ec.e.Token != "" {
		h.Set(envdapi.HeaderAccessToken, ec.e.Token)
	}
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(ec.user+":")))
}

func (ec *envdClient) process() processconnect.ProcessClient {
	return processconnect.NewProcessClient(ec.http, envdBase)
}

func (ec *envdClient) fs() filesystemconnect.FilesystemClient {
	return filesystemconnect.NewFilesystemClient(ec.http, envdBase, connect.WithReadMaxBytes(maxListingBytes))
}

// classify turns an answer of envd's Connect services into Hutch's error
// classes, keeping envd's words.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var class error
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		class = errdefs.ErrNotFound
	case connect.CodeInvalidArgument:
		class = errdefs.ErrInvalidArgument
	case connect.CodeAlreadyExists:
		class = errdefs.ErrAlreadyExists
	case connect.CodePermissionDenied:
		class = errdefs.ErrPermissionDenied
	case connect.CodeUnimplemented:
		class = errdefs.ErrNotImplemented
	case connect.CodeResourceExhausted:
		class = errdefs.ErrResourceExhausted
	case connect.CodeUnavailable:
		class = errdefs.ErrUnavailable
	}
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	if class == nil {
		return fmt.Errorf("%s: %s", op, msg)
	}
	return errdefs.Mark(fmt.Errorf("%s: %s", op, msg), class)
}

// stat is filesystem.Stat: path's entry, a final symlink not followed.
func (ec *envdClient) stat(ctx context.Context, path string) (*fspb.EntryInfo, error) {
	req := connect.NewRequest(&fspb.StatRequest{Path: path})
	ec.header(req.Header())
	resp, err := ec.fs().Stat(ctx, req)
	if err != nil {
		return nil, classify("stat "+path, err)
	}
	return resp.Msg.GetEntry(), nil
}

// exists reports whether path exists (as a link, if it is one).
func (ec *envdClient) exists(ctx context.Context, path string) (bool, error) {
	_, err := ec.stat(ctx, path)
	if errors.Is(err, errdefs.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// files makes a request to envd's /files for path. A transport failure is
// ErrUnavailable; the response is returned whatever its status.
func (ec *envdClient) files(ctx context.Context, method, path string, header http.Header, body io.Reader) (*http.Response, error) {
	req, err := ec.filesRequest(ctx, method, path, header, body)
	if err != nil {
		return nil, err
	}
	return ec.do(ctx, req)
}

// filesRequest is the request files makes.
func (ec *envdClient) filesRequest(ctx context.Context, method, path string, header http.Header, body io.Reader) (*http.Request, error) {
	q := url.Values{"username": {ec.user}}
	if path != "" {
		q.Set("path", path)
	}
	req, err := http.NewRequestWithContext(ctx, method, envdBase+"/files?"+q.Encode(), body)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if ec.e.Token != "" {
		req.Header.Set(envdapi.HeaderAccessToken, ec.e.Token)
	}
	// Bytes as they are: a Range and its Content-Length need them.
	req.Header.Set("Accept-Encoding", "identity")
	return req, nil
}

// do sends req to envd.
func (ec *envdClient) do(ctx context.Context, req *http.Request) (*http.Response, error) {
	resp, err := ec.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errdefs.Mark(fmt.Errorf("envd did not answer: %w", err), errdefs.ErrUnavailable)
	}
	return resp, nil
}

// filesError is the error of a /files answer that is not a success,
// classified by its status, with envd's message. It closes resp's body.
func filesError(op string, resp *http.Response) error {
	defer resp.Body.Close()
	var e envdapi.Error
	msg := http.StatusText(resp.StatusCode)
	if b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10)); json.Unmarshal(b, &e) == nil && e.Message != "" {
		msg = e.Message
	}
	err := fmt.Errorf("%s: %s", op, msg)
	switch resp.StatusCode {
	case http.StatusBadRequest:
		return errdefs.Mark(err, errdefs.ErrInvalidArgument)
	case http.StatusNotFound:
		return errdefs.Mark(err, errdefs.ErrNotFound)
	case http.StatusForbidden:
		return errdefs.Mark(err, errdefs.ErrPermissionDenied)
	case http.StatusConflict:
		return errdefs.Mark(err, errdefs.ErrAlreadyExists)
	case http.StatusRequestEntityTooLarge:
		return &apiError{http.StatusRequestEntityTooLarge, codeTooLarge, err.Error()}
	case http.StatusInsufficientStorage:
		return errdefs.Mark(err, errdefs.ErrResourceExhausted)
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return errdefs.Mark(err, errdefs.ErrUnavailable)
	}
	return err
}

// readFile returns the content of regular file path, refusing one larger
// than max bytes with a 413.
func (ec *envdClient) readFile(ctx context.Context, path string, max int64) ([]byte, error) {
	resp, err := ec.files(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, filesError("read "+path, resp)
	}
	defer resp.Body.Close()
	tooLarge := &apiError{http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("%s is larger than %d bytes", path, max)}
	if resp.ContentLength > max {
		return nil, tooLarge
	}
	if resp.ContentLength >= 0 {
		// One buffer of the announced size, not ReadAll's doublings;
		// a body longer than announced is cut by the transport.
		b := make([]byte, resp.ContentLength)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, tooLarge
	}
	return b, nil
}

// writeFile replaces path's content with the size bytes open returns,
// atomically (envd writes a temporary file and renames it). open may be
// called again should the request be retried. An existing file keeps its
// mode; the file belongs to the client's user.
func (ec *envdClient) writeFile(ctx context.Context, path string, size int64, open func() io.Reader) error {
	h := http.Header{"Content-Type": {"application/octet-stream"}}
	req, err := ec.filesRequest(ctx, http.MethodPost, path, h, open())
	if err != nil {
		return err
	}
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	}
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(open()), nil }
	resp, err := ec.do(ctx, req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return filesError("write "+path, resp)
	}
	resp.Body.Close()
	return nil
}

// maxHelperOutput bounds what a helper command's output may add to an
// error message.
const maxHelperOutput = 4 << 10

// helper runs argv in the sandbox as the client's user, with no stdin,
// and returns an error carrying its output when it does not exit 0.
// Callers pass every request-supplied string as its own argv element,
// never inside a shell script, so nothing a client sends is interpreted.
func (ec *envdClient) helper(ctx context.Context, argv ...string) error {
	no := false
	req := connect.NewRequest(&procpb.StartRequest{
		Process: &procpb.ProcessConfig{Cmd: argv[0], Args: argv[1:]},
		Stdin:   &no,
	})
	ec.header(req.Header())
	stream, err := ec.process().Start(ctx, req)
	if err != nil {
		return classify("start "+argv[0], err)
	}
	defer stream.Close()
	var out bytes.Buffer
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			if out.Len() < maxHelperOutput {
				out.Write(d.GetStdout())
				out.Write(d.GetStderr())
			}
		}
		if end := ev.GetEnd(); end != nil {
			if end.GetExited() && end.GetExitCode() == 0 {
				return nil
			}
			msg := strings.TrimSpace(out.String())
			if len(msg) > maxHelperOutput {
				msg = msg[:maxHelperOutput]
			}
			if msg == "" {
				msg = end.GetStatus()
			}
			return fmt.Errorf("%s: %s", argv[0], msg)
		}
	}
	if err := stream.Err(); err != nil {
		return classify("run "+argv[0], err)
	}
	return fmt.Errorf("%s: the stream ended before the process did", argv[0])
}

// signal sends sig to the process group of the process envd tagged tag.
// A process that has ended already is not an error.
func (ec *envdClient) signal(ctx context.Context, tag string, sig procpb.Signal) error {
	req := connect.NewRequest(&procpb.SendSignalRequest{
		Process: &procpb.ProcessSelector{Selector: &procpb.ProcessSelector_Tag{Tag: tag}},
		Signal:  sig,
	})
	ec.header(req.Header())
	_, err := ec.process().SendSignal(ctx, req)
	if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
		return classify("signal", err)
	}
	return nil
}

// health reports whether envd serves.
func (ec *envdClient) health(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, envdBase+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := ec.http.Do(req)
	if err != nil {
		return errdefs.Mark(fmt.Errorf("envd did not answer: %w", err), errdefs.ErrUnavailable)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return errdefs.Mark(fmt.Errorf("envd's health check answered %d", resp.StatusCode), errdefs.ErrUnavailable)
	}
	return nil
}

// passwdEntry is one line of the sandbox's /etc/passwd.
type passwdEntry struct {
	name string
	uid  uint32
	gid  uint32
}

// lookupUID finds the sandbox user with uid in the sandbox's own
// /etc/passwd (never the host's).
func (ec *envdClient) lookupUID(ctx context.Context, uid uint32) (*passwdEntry, error) {
	b, err := ec.as("root").readFile(ctx, "/etc/passwd", 4<<20)
	if err != nil {
		return nil, fmt.Errorf("reading the sandbox's /etc/passwd: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 4 || strings.HasPrefix(f[0], "#") {
			continue
		}
		u, err1 := strconv.ParseUint(f[2], 10, 32)
		g, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 == nil && err2 == nil && uint32(u) == uid {
			return &passwdEntry{name: f[0], uid: uint32(u), gid: uint32(g)}, nil
		}
	}
	return nil, badRequest("the sandbox has no user with uid %d (envd runs commands as users of its /etc/passwd)", uid)
}
