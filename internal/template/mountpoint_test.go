package template

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"testing"
)

// TestMountPointsMustBeDirectories: an image layer or copied files that
// make /proc, /sys, /dev or /etc a link (or a file) are refused, naming
// the entry; a sandbox's start would mount or write through them (review
// 27, F2, F4, F7). The same names deeper down, and directories, are fine.
func TestMountPointsMustBeDirectories(t *testing.T) {
	for _, tc := range []struct {
		name, link string
		typ        byte
		refused    bool
	}{
		{"proc", "/srv", tar.TypeSymlink, true},
		{"./sys", "/proc/self/cwd/rootfs/opt", tar.TypeSymlink, true},
		{"etc", "tmp", tar.TypeSymlink, true},
		{"dev", "", tar.TypeReg, true},
		{"etc/", "", tar.TypeDir, false},
		{"opt/proc", "/srv", tar.TypeSymlink, false},
	} {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		tw.WriteHeader(&tar.Header{Name: tc.name, Linkname: tc.link, Typeflag: tc.typ, Mode: 0o755})
		tw.Close()
		for _, how := range []string{"image layer", "copied files"} {
			var err error
			if how == "image layer" {
				_, err = unpack(context.Background(), t.TempDir(), bytes.NewReader(b.Bytes()), unpackOptions{})
			} else {
				err = Extract(context.Background(), t.TempDir(), bytes.NewReader(b.Bytes()))
			}
			var bad *BadLayerError
			if got := errors.As(err, &bad); got != tc.refused {
				t.Errorf("%s %q -> %q: refused %v (%v), want %v", how, tc.name, tc.link, got, err, tc.refused)
			}
		}
	}
}
