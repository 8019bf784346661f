package sdk_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// events collects a watch's events.
type events struct{ collector[sdk.FilesystemEvent] }

func (ev *events) has(typ sdk.EventType, name string) bool {
	return slices.ContainsFunc(ev.all(), func(e sdk.FilesystemEvent) bool { return e.Type == typ && e.Name == name })
}

func (ev *events) String() string {
	var s []string
	for _, e := range ev.all() {
		s = append(s, fmt.Sprintf("%s %s", e.Type, e.Name))
	}
	return fmt.Sprint(s)
}

// wait waits until ev has an event of typ for name.
func (ev *events) wait(t *testing.T, typ sdk.EventType, name string) {
	t.Helper()
	waitFor(t, 10*time.Second, func() string { return fmt.Sprintf("%s %s (got %s)", typ, name, ev) },
		func() bool { return ev.has(typ, name) })
}

// stopped waits for w to end.
func stopped(t *testing.T, w *sdk.WatchHandle) {
	t.Helper()
	select {
	case <-w.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end")
	}
}

// TestWatch: WatchDir events, recursion, entries, stop, timeout, errors.
func TestWatch(t *testing.T) {
	e := startServer(t)
	sbx := e.sandbox(t, sdk.CreateOptions{})
	ctx := t.Context()
	mkdir := func(t *testing.T, prefix string) string {
		dir := home + "/" + unique(prefix)
		_, err := sbx.Files.MakeDir(ctx, dir+"/sub", nil)
		must(t, err, "MakeDir")
		return dir
	}

	t.Run("create, write, remove, rename; Stop", func(t *testing.T) {
		dir := mkdir(t, "watch")
		_, err := sbx.Files.Write(ctx, dir+"/pre.txt", []byte("before the watch\n"), nil)
		must(t, err, "Write")
		var ev events
		w, err := sbx.Files.WatchDir(ctx, dir, ev.add, nil)
		must(t, err, "WatchDir")
		t.Cleanup(w.Stop)

		_, err = sbx.Files.Write(ctx, dir+"/a.txt", []byte("hello"), nil)
		must(t, err, "Write")
		ev.wait(t, sdk.EventCreate, "a.txt")
		ev.wait(t, sdk.EventWrite, "a.txt")
		// An append to a file that existed before the watch is a write.
		run(t, sbx, "echo more >> "+dir+"/pre.txt", nil)
		ev.wait(t, sdk.EventWrite, "pre.txt")
		must(t, sbx.Files.Remove(ctx, dir+"/a.txt", nil), "Remove")
		ev.wait(t, sdk.EventRemove, "a.txt")
		_, err = sbx.Files.Write(ctx, dir+"/b.txt", []byte("b"), nil)
		must(t, err, "Write")
		_, err = sbx.Files.Rename(ctx, dir+"/b.txt", dir+"/c.txt", nil)
		must(t, err, "Rename")
		ev.wait(t, sdk.EventRename, "b.txt")
		ev.wait(t, sdk.EventCreate, "c.txt")
		run(t, sbx, "chmod 600 "+dir+"/c.txt", nil)
		ev.wait(t, sdk.EventChmod, "c.txt")

		// Not recursive: nothing from the subdirectory, no entries.
		run(t, sbx, fmt.Sprintf("echo x > %[1]s/sub/inner.txt; echo y > %[1]s/top.txt", dir), nil)
		ev.wait(t, sdk.EventCreate, "top.txt")
		for _, e := range ev.all() {
			if e.Name == "sub/inner.txt" || e.Name == "inner.txt" {
				t.Errorf("a watch that is not recursive reported %s %s", e.Type, e.Name)
			}
			if e.Entry != nil {
				t.Errorf("an event has an entry without IncludeEntry: %+v", e)
			}
		}

		w.Stop()
		stopped(t, w)
		if err := w.Err(); err != nil {
			t.Errorf("Err after Stop = %v, want nil", err)
		}
		// Nothing is reported after the watch ended.
		n := len(ev.all())
		_, err = sbx.Files.Write(ctx, dir+"/after-stop.txt", []byte("x"), nil)
		must(t, err, "Write")
		if got := ev.all()[n:]; len(got) != 0 {
			t.Errorf("events after Stop: %v", got)
		}
	})

	t.Run("recursive", func(t *testing.T) {
		dir := mkdir(t, "watchrec")
		var ev events
		w, err := sbx.Files.WatchDir(ctx, dir, ev.add, &sdk.WatchOptions{Recursive: true})
		must(t, err, "WatchDir")
		t.Cleanup(w.Stop)
		_, err = sbx.Files.Write(ctx, dir+"/sub/file.txt", []byte("nested"), nil)
		must(t, err, "Write")
		ev.wait(t, sdk.EventCreate, "sub/file.txt")
		ev.wait(t, sdk.EventWrite, "sub/file.txt")
		// Directories made after the watch started are watched too, even
		// what is made in them at once, before their watch can exist.
		run(t, sbx, fmt.Sprintf("mkdir -p %[1]s/new/deeper && echo late > %[1]s/new/deeper/late.txt", dir), nil)
		ev.wait(t, sdk.EventCreate, "new")
		ev.wait(t, sdk.EventCreate, "new/deeper/late.txt")
		_, err = sbx.Files.Write(ctx, dir+"/new/deeper/later.txt", []byte("later"), nil)
		must(t, err, "Write")
		ev.wait(t, sdk.EventWrite, "new/deeper/later.txt")
		must(t, sbx.Files.Remove(ctx, dir+"/sub/file.txt", nil), "Remove")
		ev.wait(t, sdk.EventRemove, "sub/file.txt")
	})

	t.Run("IncludeEntry", func(t *testing.T) {
		dir := mkdir(t, "watchentry")
		var ev events
		w, err := sbx.Files.WatchDir(ctx, dir, ev.add, &sdk.WatchOptions{IncludeEntry: true})
		must(t, err, "WatchDir")
		t.Cleanup(w.Stop)
		run(t, sbx, fmt.Sprintf("printf 'entry!' > %s/e.txt", dir), nil)
		var got *sdk.EntryInfo
		waitFor(t, 10*time.Second, func() string { return "a write of e.txt with its 6-byte entry (got " + ev.String() + ")" }, func() bool {
			for _, e := range ev.all() {
				if e.Name == "e.txt" && e.Type == sdk.EventWrite && e.Entry != nil && e.Entry.Size == 6 {
					got = e.Entry
					return true
				}
			}
			return false
		})
		if got.Name != "e.txt" || got.Path != dir+"/e.txt" || got.Type != sdk.FileTypeFile || got.Owner != "user" || got.ModifiedTime.IsZero() {
			t.Errorf("event entry %+v", *got)
		}
		must(t, sbx.Files.Remove(ctx, dir+"/e.txt", nil), "Remove")
		ev.wait(t, sdk.EventRemove, "e.txt")
		for _, e := range ev.all() {
			if e.Type == sdk.EventRemove && e.Entry != nil {
				t.Errorf("a remove event has an entry: %+v", e)
			}
		}
	})

	t.Run("Timeout ends the watch with ErrTimeout", func(t *testing.T) {
		dir := mkdir(t, "watchto")
		w, err := sbx.Files.WatchDir(ctx, dir, nil, &sdk.WatchOptions{Timeout: time.Second})
		must(t, err, "WatchDir")
		t.Cleanup(w.Stop)
		stopped(t, w)
		is(t, w.Err(), sdk.ErrTimeout, "Err after the Timeout")
	})

	t.Run("errors", func(t *testing.T) {
		_, err := sbx.Files.WatchDir(ctx, home+"/"+unique("nowatch"), nil, nil)
		is(t, err, sdk.ErrNotFound, "WatchDir of a missing directory")
		_, err = sbx.Files.WatchDir(ctx, "/etc/passwd", nil, nil)
		is(t, err, sdk.ErrInvalidArgument, "WatchDir of a file")
	})
}
