// Package link is a placeholder until the real package lands.
package link

import (
	"context"
	"log/slog"
	"net"
)

type Host struct{}

func NewHost(c net.Conn, log *slog.Logger) *Host     { return &Host{} }
func (h *Host) Serve(ln net.Listener, ch byte) error { return nil }
func (h *Host) Wait(ctx context.Context) error       { return nil }
func (h *Host) Close() error                         { return nil }

type Guest struct{}

func NewGuest(raw net.Conn, channels int, log *slog.Logger) *Guest { return &Guest{} }
func (g *Guest) Listener(ch byte) net.Listener                     { return nil }

// EnvChannels tells a first process that serves extra files that they
// arrive as that many channels of the link on its stdin.
const EnvChannels = "HUTCH_LINK_CHANNELS"
