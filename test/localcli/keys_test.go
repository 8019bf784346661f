package localcli

// hutch keys: API keys for the control plane, shown once, stored hashed.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestKeys(t *testing.T) {
	r := hutch(t, "", "keys", "create", "--name", "e2e")
	key := strings.TrimSpace(r.Stdout)
	if r.Code != 0 || !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(key) {
		t.Fatalf("keys create: %s; want one e2b_<40 hex> key on stdout", r)
	}
	db := filepath.Join(dataDir, "hutch.db")
	if fi, err := os.Stat(db); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("database %s: %v, mode %v; want 0600", db, err, fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(db); strings.Contains(string(b), key[4:]) {
		t.Error("the database holds the key in clear")
	}

	var keys []struct {
		ID, Name, Prefix string
		Revoked          *string
	}
	list := func() {
		t.Helper()
		r := hutch(t, "", "keys", "ls", "--json")
		if r.Code != 0 {
			t.Fatalf("keys ls: %s", r)
		}
		keys = nil
		if err := json.Unmarshal([]byte(r.Stdout), &keys); err != nil {
			t.Fatalf("keys ls --json: %v\n%s", err, r.Stdout)
		}
	}
	list()
	var id string
	for _, k := range keys {
		if k.Name == "e2e" {
			id = k.ID
			if !strings.HasPrefix(key, k.Prefix) || len(k.Prefix) >= len(key) || k.Revoked != nil {
				t.Errorf("listed key %+v for %s: want a short prefix of it, not revoked", k, key)
			}
		}
	}
	if id == "" {
		t.Fatalf("the new key is not listed: %+v", keys)
	}
	if out := hutch(t, "", "keys", "ls").Stdout; strings.Contains(out, key) {
		t.Errorf("keys ls shows the whole key:\n%s", out)
	}

	if r := hutch(t, "", "keys", "revoke", id); r.Code != 0 {
		t.Fatalf("keys revoke: %s", r)
	}
	list()
	for _, k := range keys {
		if k.ID == id && k.Revoked == nil {
			t.Errorf("key %s not revoked: %+v", id, k)
		}
	}
	if r := hutch(t, "", "keys", "revoke", "key_nosuchkey"); r.Code != 1 || !strings.Contains(r.Stderr, "not found") {
		t.Errorf("revoke of an unknown key: %s; want exit 1 and not found", r)
	}
}
