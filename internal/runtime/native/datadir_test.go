package native

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDataDirReachable(t *testing.T) {
	tests := []struct {
		name       string
		parent     os.FileMode // of the directory above the data dir
		data       os.FileMode
		wantData   os.FileMode
		wantClosed bool // refused: the parent is in the way
	}{
		{name: "mktemp -d", parent: 0o755, data: 0o700, wantData: 0o711},
		{name: "group may read", parent: 0o755, data: 0o750, wantData: 0o751},
		{name: "already open", parent: 0o755, data: 0o755, wantData: 0o755},
		{name: "passable only", parent: 0o711, data: 0o711, wantData: 0o711},
		{name: "closed parent", parent: 0o700, data: 0o700, wantData: 0o711, wantClosed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			top := t.TempDir()
			// The test's own directories are not under test.
			os.Chmod(filepath.Dir(top), 0o711)
			os.Chmod(top, 0o711)
			parent := filepath.Join(top, "parent")
			data := filepath.Join(parent, "data")
			if err := os.MkdirAll(data, 0o755); err != nil {
				t.Fatal(err)
			}
			os.Chmod(data, tc.data)
			os.Chmod(parent, tc.parent)
			defer os.Chmod(parent, 0o755)

			if err := openToSandboxes(data); err != nil {
				t.Fatal(err)
			}
			err := reachable(data)
			var closed *unreachableError
			if got := errors.As(err, &closed); got != tc.wantClosed {
				t.Fatalf("makeReachable = %v, want refused %v", err, tc.wantClosed)
			}
			if tc.wantClosed {
				for _, want := range []string{parent + " (mode 0700)", "chmod o+x " + parent} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not contain %q", err, want)
					}
				}
				defer func() {
					// Opened since: it counts at once.
					os.Chmod(parent, 0o701)
					if err := reachable(data); err != nil {
						t.Errorf("after chmod o+x of the parent: %v", err)
					}
				}()
			} else if err != nil {
				t.Fatal(err)
			}
			if fi, _ := os.Stat(data); fi.Mode().Perm() != tc.wantData {
				t.Errorf("data dir mode %04o, want %04o", fi.Mode().Perm(), tc.wantData)
			}
			if fi, _ := os.Stat(parent); fi.Mode().Perm() != tc.parent {
				t.Errorf("parent mode %04o changed, want %04o", fi.Mode().Perm(), tc.parent)
			}
		})
	}
}
