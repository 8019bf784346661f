package template

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// TestConfigSizeBounded: an image whose config is larger than any real
// one is refused before the config is read (review 27 round 2, G8: a 1.5
// GB config took the server to 6 GB); a normal one is read.
func TestConfigSizeBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  int
		ok   bool
	}{
		{"small", 100, true},
		{"past the bound", maxConfigSize + 1, false},
	} {
		img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{OS: "linux", Config: v1.Config{Env: []string{"X=" + strings.Repeat("x", tc.env)}}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = configFile(img)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestTagsBounded: a template name has at most MaxTags tags, however
// they come (a build's, Tag's); tags it has already do not count again.
func TestTagsBounded(t *testing.T) {
	s := Open(t.TempDir())
	var tags []string
	for i := range MaxTags - 1 {
		tags = append(tags, fmt.Sprint("t", i))
	}
	commit(t, s, "app", tags, Config{}, files{"v": "1"})
	tags = append(tags, "extra") // MaxTags now
	if _, err := s.Tag("app:t0", tags...); err != nil {
		t.Errorf("tags it has already: %v", err)
	}
	if _, err := s.Tag("app:t0", "one-more"); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("tag %d: %v, want ErrResourceExhausted", MaxTags+1, err)
	}
}
