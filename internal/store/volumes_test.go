package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

func TestVolumes(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	_, k1, err := s.CreateKey(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	_, k2, err := s.CreateKey(ctx, "two")
	if err != nil {
		t.Fatal(err)
	}
	v := Volume{ID: "vol-1", Name: "data", KeyID: k1.ID, Token: "tok"}
	if err := s.CreateVolume(ctx, &v); err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	for _, tc := range []struct {
		name string
		v    Volume
		want error
	}{
		{"same name, same key", Volume{ID: "vol-2", Name: "data", KeyID: k1.ID, Token: "t"}, errdefs.ErrAlreadyExists},
		{"same id", Volume{ID: "vol-1", Name: "other", KeyID: k1.ID, Token: "t"}, errdefs.ErrAlreadyExists},
		{"same name, other key", Volume{ID: "vol-3", Name: "data", KeyID: k2.ID, Token: "t"}, nil},
		{"unknown key", Volume{ID: "vol-4", Name: "x", KeyID: "key_nope", Token: "t"}, errdefs.ErrInvalidArgument},
		{"no token", Volume{ID: "vol-5", Name: "x", KeyID: k1.ID}, errdefs.ErrInvalidArgument},
		{"bad id", Volume{ID: "../x", Name: "x", KeyID: k1.ID, Token: "t"}, errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.CreateVolume(ctx, &tc.v)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("CreateVolume = %v, want %v", err, tc.want)
			}
		})
	}

	got, err := s.GetVolume(ctx, k1.ID, "vol-1")
	if err != nil || got.Name != "data" || got.Token != "tok" || got.KeyID != k1.ID || got.Created.IsZero() {
		t.Errorf("GetVolume = %+v, %v", got, err)
	}
	if _, err := s.GetVolume(ctx, k2.ID, "vol-1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetVolume of another key's volume = %v, want not found", err)
	}
	if got, err := s.VolumeByName(ctx, k2.ID, "data"); err != nil || got.ID != "vol-3" {
		t.Errorf("VolumeByName(k2, data) = %+v, %v, want vol-3", got, err)
	}
	list, err := s.ListVolumes(ctx, k1.ID)
	if err != nil || len(list) != 1 || list[0].ID != "vol-1" {
		t.Errorf("ListVolumes(k1) = %+v, %v", list, err)
	}

	// A sandbox mounting the volume keeps it.
	sb := &Sandbox{ID: "sb1", TemplateID: "base", EndAt: time.Now().Add(time.Hour), KeyID: k1.ID,
		VolumeMounts: []VolumeMount{{VolumeID: "vol-1", Name: "data", Path: "/mnt/data"}}}
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	back, err := s.GetSandbox(ctx, "", "sb1")
	if err != nil || len(back.VolumeMounts) != 1 || back.VolumeMounts[0] != sb.VolumeMounts[0] {
		t.Errorf("GetSandbox mounts = %+v, %v", back.VolumeMounts, err)
	}
	if users, err := s.VolumeUsers(ctx, "vol-1"); err != nil || len(users) != 1 || users[0] != "sb1" {
		t.Errorf("VolumeUsers = %v, %v", users, err)
	}
	if err := s.DeleteVolume(ctx, k1.ID, "vol-1"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("DeleteVolume in use = %v, want failed precondition", err)
	}
	if err := s.DeleteVolume(ctx, k2.ID, "vol-1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("DeleteVolume by another key = %v, want not found", err)
	}
	if err := s.DeleteSandbox(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVolume(ctx, k1.ID, "vol-1"); err != nil {
		t.Errorf("DeleteVolume = %v", err)
	}
	if _, err := s.GetVolume(ctx, "", "vol-1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetVolume after delete = %v, want not found", err)
	}
	// The name is free again.
	if err := s.CreateVolume(ctx, &Volume{ID: "vol-6", Name: "data", KeyID: k1.ID, Token: "t"}); err != nil {
		t.Errorf("CreateVolume with a freed name: %v", err)
	}
	// A sandbox without mounts reads back an empty list.
	sb2 := &Sandbox{ID: "sb2", TemplateID: "base", EndAt: time.Now().Add(time.Hour)}
	if err := s.CreateSandbox(ctx, sb2); err != nil {
		t.Fatal(err)
	}
	if back, err := s.GetSandbox(ctx, "", "sb2"); err != nil || len(back.VolumeMounts) != 0 {
		t.Errorf("mounts of a sandbox without = %#v, %v", back.VolumeMounts, err)
	}
}
