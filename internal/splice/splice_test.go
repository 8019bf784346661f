package splice

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// pair returns the two ends of a loopback TCP connection.
func pair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// joined starts Join between two pairs and returns the outer ends: what
// client writes reaches server, and back; done closes when Join returns.
func joined(t *testing.T, linger time.Duration) (client, server *net.TCPConn, done chan struct{}) {
	client, a := pair(t)
	b, server := pair(t)
	done = make(chan struct{})
	go func() {
		Join(a, nil, b, nil, linger)
		close(done)
	}()
	return client, server, done
}

func waitDone(t *testing.T, done chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Join still running: %s", what)
	}
}

func TestHalfCloseCarriesTheAnswer(t *testing.T) {
	client, server, done := joined(t, 0)
	client.Write([]byte("question"))
	client.CloseWrite()
	got, err := io.ReadAll(server)
	if err != nil || string(got) != "question" {
		t.Fatalf("server read %q, %v", got, err)
	}
	server.Write([]byte("answer"))
	server.CloseWrite()
	got, err = io.ReadAll(client)
	if err != nil || string(got) != "answer" {
		t.Fatalf("client read %q, %v", got, err)
	}
	waitDone(t, done, "after both ways ended")
}

// A peer that neither reads nor closes once the other side has gone holds
// the connections only for the linger time.
func TestIdleAfterHalfCloseEnds(t *testing.T) {
	client, server, done := joined(t, 100*time.Millisecond)
	client.Write([]byte("x"))
	client.Close()
	waitDone(t, done, "the server never closed")
	if _, err := io.ReadAll(server); err != nil {
		t.Fatalf("server: %v", err)
	}
}

// A way that keeps moving after the other ended is not cut at the linger
// time.
func TestStreamAfterHalfCloseContinues(t *testing.T) {
	client, server, done := joined(t, 100*time.Millisecond)
	client.CloseWrite()
	var want bytes.Buffer
	go func() {
		for i := 0; i < 12; i++ { // ~3.5 lingers
			server.Write([]byte{byte('a' + i)})
			time.Sleep(30 * time.Millisecond)
		}
		server.CloseWrite()
	}()
	for i := 0; i < 12; i++ {
		want.WriteByte(byte('a' + i))
	}
	got, err := io.ReadAll(client)
	if err != nil || string(got) != want.String() {
		t.Fatalf("client read %q, %v; want %q", got, err, want.String())
	}
	waitDone(t, done, "after the stream ended")
}

// Without a half-close nothing lingers: an idle connection in both ways
// stays open (idleness alone is the business of whoever owns the ends).
func TestIdleBothWaysStaysOpen(t *testing.T) {
	client, server, done := joined(t, 50*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("Join ended an idle connection nobody closed")
	default:
	}
	client.Write([]byte("late"))
	b := make([]byte, 4)
	if _, err := io.ReadFull(server, b); err != nil || string(b) != "late" {
		t.Fatalf("server read %q, %v", b, err)
	}
}

func TestResetClosesBoth(t *testing.T) {
	client, server, done := joined(t, 0)
	client.SetLinger(0)
	client.Write([]byte("x"))
	client.Close() // RST
	waitDone(t, done, "after a reset")
	io.ReadAll(server)
}
