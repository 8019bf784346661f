package store

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

var keyRe = regexp.MustCompile(`^e2b_[0-9a-f]{40}$`)

func TestCreateVerifyRevokeKey(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()

	plain, k, err := s.CreateKey(ctx, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	if !keyRe.MatchString(plain) {
		t.Fatalf("key %q does not look like e2b_<40 hex>", plain)
	}
	if k.Name != "laptop" || k.Prefix != plain[4:12] || k.ID == "" || k.Created.IsZero() || k.Revoked != nil {
		t.Fatalf("unexpected key %+v", k)
	}
	// The plaintext is not stored anywhere in the database.
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM api_keys WHERE name = ? OR id = ? OR prefix = ?`, plain, plain, plain).Scan(&n); err != nil || n != 0 {
		t.Fatalf("plaintext found in table: %d %v", n, err)
	}

	got, err := s.VerifyKey(ctx, plain)
	if err != nil || got.ID != k.ID {
		t.Fatalf("VerifyKey = %+v, %v", got, err)
	}

	plain2, k2, err := s.CreateKey(ctx, "ci")
	if err != nil {
		t.Fatal(err)
	}
	if plain2 == plain || k2.ID == k.ID {
		t.Fatal("two keys are equal")
	}
	if c, _ := s.CountKeys(ctx); c != 2 {
		t.Fatalf("CountKeys = %d", c)
	}

	for _, tc := range []struct {
		name string
		key  string
	}{
		{"unknown", "e2b_" + strings.Repeat("0", 40)},
		{"malformed", "nope"},
		{"empty", ""},
		{"uppercase", strings.ToUpper(plain)},
	} {
		if _, err := s.VerifyKey(ctx, tc.key); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("VerifyKey(%s) = %v, want ErrNotFound", tc.name, err)
		} else if tc.key != "" && strings.Contains(err.Error(), tc.key) {
			t.Errorf("error leaks the key: %v", err)
		}
	}

	// Revoke by prefix (with e2b_), then by ID; revoking twice is fine.
	if err := s.RevokeKey(ctx, "e2b_"+k.Prefix); err != nil {
		t.Fatalf("RevokeKey(prefix): %v", err)
	}
	if _, err := s.VerifyKey(ctx, plain); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("revoked key verifies: %v", err)
	}
	if err := s.RevokeKey(ctx, k.ID); err != nil {
		t.Fatalf("RevokeKey again: %v", err)
	}
	if err := s.RevokeKey(ctx, "key_doesnotexist"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("RevokeKey(unknown) = %v", err)
	}
	if _, err := s.VerifyKey(ctx, plain2); err != nil {
		t.Fatalf("other key stopped working: %v", err)
	}
	if c, _ := s.CountKeys(ctx); c != 1 {
		t.Fatalf("CountKeys after revoke = %d", c)
	}

	keys, err := s.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].ID != k.ID || keys[1].ID != k2.ID {
		t.Fatalf("ListKeys = %+v", keys)
	}
	if keys[0].Revoked == nil || keys[1].Revoked != nil {
		t.Fatalf("revocation not listed: %+v", keys)
	}
}

func TestRevokeAmbiguousPrefix(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	a := "e2b_12345678" + strings.Repeat("a", 32)
	b := "e2b_12345678" + strings.Repeat("b", 32)
	ka, err := s.AddKey(ctx, "a", a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddKey(ctx, "b", b); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, "12345678"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("ambiguous prefix: %v", err)
	}
	if err := s.RevokeKey(ctx, ka.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("empty: %v", err)
	}
}

func TestAddKey(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	good := "e2b_" + strings.Repeat("0123456789", 4)

	k1, err := s.AddKey(ctx, "operator", good)
	if err != nil {
		t.Fatal(err)
	}
	if k1.Prefix != "01234567" {
		t.Fatalf("prefix = %q", k1.Prefix)
	}
	k2, err := s.AddKey(ctx, "renamed", good)
	if err != nil {
		t.Fatalf("AddKey again: %v", err)
	}
	if k2 != k1 {
		t.Fatalf("AddKey not idempotent: %+v vs %+v", k2, k1)
	}
	if n, _ := s.CountKeys(ctx); n != 1 {
		t.Fatalf("CountKeys = %d", n)
	}
	if _, err := s.VerifyKey(ctx, good); err != nil {
		t.Fatal(err)
	}

	// Re-adding a revoked key does not resurrect it.
	if err := s.RevokeKey(ctx, k1.ID); err != nil {
		t.Fatal(err)
	}
	k3, err := s.AddKey(ctx, "operator", good)
	if err != nil || k3.Revoked == nil {
		t.Fatalf("AddKey of revoked key = %+v, %v", k3, err)
	}
	if _, err := s.VerifyKey(ctx, good); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("revoked key verifies after AddKey: %v", err)
	}

	for _, bad := range []string{
		"",
		"e2b_",
		"e2b_dev",
		"e2b_" + strings.Repeat("a", 39),
		"e2b_" + strings.Repeat("a", 41),
		"e2b_" + strings.Repeat("A", 40),
		"e2b_" + strings.Repeat("g", 40),
		"E2B_" + strings.Repeat("a", 40),
		"xyz_" + strings.Repeat("a", 40),
		" e2b_" + strings.Repeat("a", 40),
	} {
		if _, err := s.AddKey(ctx, "bad", bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("AddKey(%q) = %v, want ErrInvalidArgument", bad, err)
		} else if len(bad) > 8 && strings.Contains(err.Error(), bad) {
			t.Errorf("error leaks the key: %v", err)
		}
	}
}

func TestImportKeyTakesTheClustersID(t *testing.T) {
	ctx := context.Background()
	a, _ := openTest(t)
	b, _ := openTest(t)
	const plain = "e2b_0123456789012345678901234567890123456789"
	ka, err := a.AddKey(ctx, "on a", plain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddKey(ctx, "on b", plain); err != nil {
		t.Fatal(err)
	}
	exported, err := a.ExportKeys(ctx)
	if err != nil || len(exported) != 1 || exported[0].ID != ka.ID || len(exported[0].Hash) != 32 {
		t.Fatalf("ExportKeys = %+v, %v", exported, err)
	}
	// The same key under another id here: it takes a's.
	if err := b.ImportKey(ctx, exported[0]); err != nil {
		t.Fatal(err)
	}
	if k, err := b.VerifyKey(ctx, plain); err != nil || k.ID != ka.ID {
		t.Fatalf("after import: %v %v, want id %s", k.ID, err, ka.ID)
	}
	// Revoked in the cluster: revoked here, and not brought back.
	now := time.Now()
	exported[0].Revoked = &now
	if err := b.ImportKey(ctx, exported[0]); err != nil {
		t.Fatal(err)
	}
	exported[0].Revoked = nil
	if err := b.ImportKey(ctx, exported[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.VerifyKey(ctx, plain); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a revoked key verifies after import: %v", err)
	}
	for _, bad := range []KeyRecord{{Key: Key{ID: "key_x"}, Hash: []byte("short")}, {Key: Key{ID: "nope"}, Hash: make([]byte, 32)}} {
		if err := b.ImportKey(ctx, bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ImportKey(%+v) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}

// TestKeyRoles: keys carry their role through the store and through a
// cluster's import; an imported key whose role is unknown may do the
// least.
func TestKeyRoles(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	_, admin, err := s.CreateKey(ctx, "op")
	if err != nil || admin.Role != RoleAdmin {
		t.Fatalf("CreateKey: %+v, %v; want an admin key", admin, err)
	}
	_, user, err := s.NewKey(ctx, "agent", RoleUser)
	if err != nil || user.Role != RoleUser {
		t.Fatalf("NewKey user: %+v, %v", user, err)
	}
	if _, _, err := s.NewKey(ctx, "x", Role("root")); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("NewKey of role root: %v, want invalid argument", err)
	}
	if got, err := s.GetKey(ctx, user.ID); err != nil || got.Role != RoleUser {
		t.Errorf("GetKey: %+v, %v", got, err)
	}
	exported, err := s.ExportKeys(ctx)
	if err != nil || len(exported) != 2 || exported[0].Role != RoleAdmin || exported[1].Role != RoleUser {
		t.Fatalf("ExportKeys: %+v, %v", exported, err)
	}
	other, _ := openTest(t)
	for _, tc := range []struct {
		rec  KeyRecord
		want Role
	}{
		{exported[0], RoleAdmin},
		{exported[1], RoleUser},
		{KeyRecord{Key: Key{ID: "key_00000000000000ff", Name: "old", Prefix: "ffffffff", Created: time.Now()}, Hash: hashKey(KeyPrefix + strings.Repeat("f", keyHexLen))}, RoleUser},
	} {
		if err := other.ImportKey(ctx, tc.rec); err != nil {
			t.Fatal(err)
		}
		if got, err := other.GetKey(ctx, tc.rec.ID); err != nil || got.Role != tc.want {
			t.Errorf("imported %s (role %q): role %q, %v; want %q", tc.rec.ID, tc.rec.Role, got.Role, err, tc.want)
		}
	}
	if _, err := s.GetKey(ctx, "key_nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetKey of no key: %v, want not found", err)
	}
}
