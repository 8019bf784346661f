package errdefs_test

import (
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

func TestMark(t *testing.T) {
	cause := &fs.PathError{Op: "open", Path: "/x", Err: os.ErrNotExist}
	tests := []struct {
		name    string
		err     error
		msg     string
		classes []error // errors.Is holds for each
	}{
		{"text only", errdefs.Mark(errors.New("process with pid 7 not found"), errdefs.ErrNotFound),
			"process with pid 7 not found", []error{errdefs.ErrNotFound}},
		{"keeps what it wraps", errdefs.Mark(cause, errdefs.ErrInvalidArgument),
			"open /x: file does not exist", []error{errdefs.ErrInvalidArgument, os.ErrNotExist}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.msg {
				t.Errorf("message %q, want %q", got, tc.msg)
			}
			for _, c := range tc.classes {
				if !errors.Is(tc.err, c) {
					t.Errorf("errors.Is(%v) = false", c)
				}
			}
		})
	}
	var pe *fs.PathError
	if !errors.As(errdefs.Mark(cause, errdefs.ErrNotFound), &pe) || pe != cause {
		t.Error("errors.As does not reach the marked error")
	}
	if errdefs.Mark(nil, errdefs.ErrNotFound) != nil {
		t.Error("Mark(nil) is not nil")
	}
}
