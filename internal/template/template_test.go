package template

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

func TestMirrorIn(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"deb822", "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n", "http://mirror.example/debian"},
		{"deb822 security only", "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n", ""},
		{"one-line", "# comment\ndeb http://mirror.example/debian bookworm main\n", "http://mirror.example/debian"},
		{"one-line with options", "deb [arch=amd64 signed-by=/k.gpg] http://m.example/d bookworm main\n", "http://m.example/d"},
		{"other suite", "deb http://m.example/d bullseye main\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "sources")
			os.WriteFile(p, []byte(tc.content), 0o644)
			if got := mirrorIn(p); got != tc.want {
				t.Errorf("mirrorIn = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestStoreGetList(t *testing.T) {
	s := Open(t.TempDir())
	if _, err := s.Get("base"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get of an unbuilt template = %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"", "../etc", "a/b", "Base", ".hidden"} {
		if _, err := s.Get(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Get(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
	dir := filepath.Join(s.Dir(), "mini")
	os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755)
	os.WriteFile(filepath.Join(dir, "template.json"), []byte(`{"defaultUser":"user","recipeHash":"abc"}`), 0o644)
	tpl, err := s.Get("mini")
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Name != "mini" || tpl.DefaultUser != "user" || tpl.RootFS != filepath.Join(dir, "rootfs") {
		t.Errorf("Get = %+v", tpl)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 || list[0].Name != "mini" {
		t.Errorf("List = %v, %v; want [mini]", list, err)
	}
}

func TestBuildUnknownRecipe(t *testing.T) {
	_, _, err := Open(t.TempDir()).Build(t.Context(), "no-such-recipe", BuildOptions{})
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Build of an unknown recipe = %v, want ErrNotFound", err)
	}
}
