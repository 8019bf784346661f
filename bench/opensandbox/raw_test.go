package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestExecdRun: the raw command is done at execution_complete (what
// follows is read, not judged), a command that fails or a stream that
// ends early is an error, and the request carries the endpoint's token. The streams are written as
// internal/osbexecd writes them ("data: <json>" and a blank line).
func TestExecdRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  int
		events  []string
		wantErr string
	}{
		{"completes", 200, []string{`{"type":"init","text":"c1"}`, `{"type":"stdout","text":"x"}`, `{"type":"execution_complete","execution_time":1}`}, ""},
		{"events after completion", 200, []string{`{"type":"init","text":"c1"}`, `{"type":"execution_complete"}`, `{"type":"ping"}`}, ""},
		{"exit code", 200, []string{`{"type":"init","text":"c1"}`, `{"type":"error","error":{"ename":"CommandExecError","evalue":"3","traceback":[]}}`}, "exited with 3"},
		{"no completion", 200, []string{`{"type":"init","text":"c1"}`}, "without execution_complete"},
		{"refused", 404, nil, "404"},
		{"not an event", 200, []string{`{"type":`}, "event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/command" || r.Header.Get("X-EXECD-ACCESS-TOKEN") != "tok" {
					http.Error(w, "wrong request", http.StatusBadRequest)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(tc.status)
				for _, ev := range tc.events {
					fmt.Fprintf(w, "data: %s\n\n", ev)
				}
			}))
			defer srv.Close()
			e := &execd{c: srv.Client(), base: srv.URL, token: "tok"}
			d, err := e.run(context.Background(), "true")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("run: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("run: error %v, want one saying %q", err, tc.wantErr)
			case tc.wantErr == "" && d <= 0:
				t.Errorf("run took %v", d)
			}
		})
	}
}
