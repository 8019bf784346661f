package sdk

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
)

func TestConfigFromEnvironment(t *testing.T) {
	vars := []string{"HUTCH_API_KEY", "E2B_API_KEY", "HUTCH_API_URL", "E2B_API_URL", "HUTCH_SANDBOX_URL", "E2B_SANDBOX_URL", "HUTCH_DOMAIN", "E2B_DOMAIN"}
	for _, tc := range []struct {
		name                  string
		cfg                   Config
		env                   map[string]string
		key, api, sandbox, dm string
	}{
		{name: "nothing set: local hutch serve", api: DefaultAPIURL, sandbox: DefaultAPIURL},
		{name: "E2B variables", env: map[string]string{"E2B_API_KEY": "e2b_1", "E2B_API_URL": "http://h:1/", "E2B_SANDBOX_URL": "http://s:2"},
			key: "e2b_1", api: "http://h:1", sandbox: "http://s:2"},
		{name: "HUTCH variables win over E2B's", env: map[string]string{"E2B_API_KEY": "e2b_1", "HUTCH_API_KEY": "e2b_2", "E2B_API_URL": "http://e", "HUTCH_API_URL": "http://h"},
			key: "e2b_2", api: "http://h", sandbox: "http://h"},
		{name: "options win over the environment", cfg: Config{APIKey: "k", APIURL: "http://opt"}, env: map[string]string{"HUTCH_API_KEY": "e2b_2", "HUTCH_API_URL": "http://h"},
			key: "k", api: "http://opt", sandbox: "http://opt"},
		{name: "a domain, as E2B's SDKs", env: map[string]string{"E2B_DOMAIN": "example.dev"}, api: "https://api.example.dev", dm: "example.dev"},
		{name: "a domain and an API URL", cfg: Config{APIURL: "http://a", Domain: "d.test"}, api: "http://a", dm: "d.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range vars {
				t.Setenv(v, "")
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			got := tc.cfg.resolved()
			if got.APIKey != tc.key || got.APIURL != tc.api || got.SandboxURL != tc.sandbox || got.Domain != tc.dm {
				t.Errorf("got key %q api %q sandbox %q domain %q; want %q %q %q %q", got.APIKey, got.APIURL, got.SandboxURL, got.Domain, tc.key, tc.api, tc.sandbox, tc.dm)
			}
			if got.RequestTimeout != DefaultRequestTimeout || got.HTTPClient == nil {
				t.Errorf("defaults not filled in: %+v", got)
			}
		})
	}
}

func TestNewClientRefusesBadConfig(t *testing.T) {
	for _, v := range []string{"HUTCH_API_KEY", "E2B_API_KEY"} {
		t.Setenv(v, "")
	}
	if _, err := NewClient(Config{}); !errors.Is(err, ErrAuthentication) {
		t.Errorf("no key: %v, want ErrAuthentication", err)
	}
	if _, err := NewClient(Config{APIKey: "k", APIURL: "ftp://x"}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ftp URL: %v, want ErrInvalidArgument", err)
	}
}

// TestAPIErrors checks that E2B's error bodies become typed errors with the
// server's message, and that the key travels in X-API-KEY.
func TestAPIErrors(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		kind   error
		msg    string
	}{
		{404, `{"code":404,"message":"sandbox \"x\" not found"}`, ErrNotFound, `sandbox "x" not found`},
		{401, `{"code":401,"message":"invalid API key"}`, ErrAuthentication, "invalid API key"},
		{400, `{"code":400,"message":"timeout: too long"}`, ErrInvalidArgument, "timeout: too long"},
		{429, `slow down`, ErrRateLimit, "slow down"},
		{502, `<html>bad gateway</html>`, ErrNotRunning, "502 Bad Gateway"},
		{500, ``, nil, "500 Internal Server Error"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-API-KEY") != "e2b_k" {
				t.Errorf("X-API-KEY = %q", r.Header.Get("X-API-KEY"))
			}
			w.WriteHeader(tc.status)
			w.Write([]byte(tc.body))
		}))
		c, err := NewClient(Config{APIKey: "e2b_k", APIURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.GetInfo(context.Background(), "x")
		srv.Close()
		var e *Error
		if !errors.As(err, &e) || e.StatusCode != tc.status || !strings.Contains(e.Error(), tc.msg) {
			t.Errorf("%d: got %v, want an *Error with status %d and %q", tc.status, err, tc.status, tc.msg)
			continue
		}
		if tc.kind != nil && !errors.Is(err, tc.kind) {
			t.Errorf("%d: %v does not match %v", tc.status, err, tc.kind)
		}
	}
}

func TestRPCErrors(t *testing.T) {
	for _, tc := range []struct {
		code connect.Code
		kind error
	}{
		{connect.CodeNotFound, ErrNotFound},
		{connect.CodeUnauthenticated, ErrAuthentication},
		{connect.CodeInvalidArgument, ErrInvalidArgument},
		{connect.CodeAlreadyExists, ErrAlreadyExists},
		{connect.CodeDeadlineExceeded, ErrTimeout},
		{connect.CodeDeadlineExceeded, context.DeadlineExceeded},
		{connect.CodeCanceled, context.Canceled},
		{connect.CodeUnavailable, ErrNotRunning},
		{connect.CodeResourceExhausted, ErrRateLimit},
	} {
		err := rpcError("op", connect.NewError(tc.code, errors.New("why")))
		if !errors.Is(err, tc.kind) {
			t.Errorf("%v: %v does not match %v", tc.code, err, tc.kind)
		}
	}
	if rpcError("op", nil) != nil {
		t.Error("rpcError(nil) is not nil")
	}
}

func TestCommandExitError(t *testing.T) {
	var err error = &CommandExitError{CommandResult{ExitCode: 3, Error: "exit status 3", Stderr: "boom"}}
	var ce *CommandExitError
	if !errors.As(err, &ce) || ce.ExitCode != 3 || ce.Stderr != "boom" {
		t.Fatalf("errors.As: %+v", ce)
	}
	if err.Error() != "command exited with code 3" {
		t.Errorf("message %q", err.Error())
	}
	killed := &CommandExitError{CommandResult{ExitCode: -1, Error: "signal: killed"}}
	if killed.Error() != "command exited with code -1: signal: killed" {
		t.Errorf("message %q", killed.Error())
	}
}

// TestSignedURLs checks that the URLs verify with envd's own check and
// name /files at the root of the sandbox URL.
func TestSignedURLs(t *testing.T) {
	c, err := NewClient(Config{APIKey: "k", APIURL: "http://127.0.0.1:3000/prefix"})
	if err != nil {
		t.Fatal(err)
	}
	sbx := c.newSandbox(e2bapiSandbox("ia", "tok"))
	for _, tc := range []struct {
		name, path, op string
		opts           *URLOptions
		get            func(string, *URLOptions) (string, error)
	}{
		{"download", "/home/user/a b.txt", "read", nil, sbx.DownloadURL},
		{"download as root, expiring", "x", "read", &URLOptions{User: "root", Expires: time.Minute}, sbx.DownloadURL},
		{"upload", "dir/y", "write", nil, sbx.UploadURL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := tc.get(tc.path, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			u, err := url.Parse(raw)
			if err != nil || u.Path != "/files" || u.Host != "127.0.0.1:3000" {
				t.Fatalf("URL %q: want http://127.0.0.1:3000/files?…", raw)
			}
			q := u.Query()
			var exp int64
			if v := q.Get("signature_expiration"); v != "" {
				exp = mustInt(t, v)
			}
			if want := envdapi.Sign(tc.path, tc.op, q.Get("username"), "tok", exp); q.Get("signature") != want || q.Get("path") != tc.path {
				t.Errorf("signature %q path %q, want %q %q", q.Get("signature"), q.Get("path"), want, tc.path)
			}
		})
	}
	unsigned := c.newSandbox(e2bapiSandbox("ib", ""))
	if _, err := unsigned.DownloadURL("x", &URLOptions{Expires: time.Minute}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("expiring URL without a token: %v", err)
	}
}

func e2bapiSandbox(id, token string) e2bapi.Sandbox {
	return e2bapi.Sandbox{SandboxID: id, TemplateID: "base", EnvdVersion: "0.6.4", EnvdAccessToken: token}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
