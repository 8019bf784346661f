package envd

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envd/envderr"
	"github.com/hutch-sandbox/hutch/internal/envd/permissions"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/splice"
)

// tunnel serves "CONNECT 127.0.0.1:<port>" on the host's socket: it dials
// that port on the sandbox's own loopback and, once connected, answers 200
// and splices the two connections. This is how `hutch serve` reaches any
// port inside a sandbox — HTTP, WebSockets or raw TCP — without the sandbox
// needing a network at all. Only loopback targets are accepted: the tunnel
// reaches the sandbox's own services, never onward.
func (s *Server) tunnel(w http.ResponseWriter, r *http.Request) {
	// Each tunnel holds about six of envd's descriptors (its two sockets
	// and, while bytes move, a splice pipe each way); unbounded, a client
	// of a public port could use up envd's and leave it unable to start a
	// command (review 4: 3300 tunnels to a service that never answered,
	// from one address with no key).
	select {
	case s.tunnels <- struct{}{}:
		defer func() { <-s.tunnels }()
	default:
		envderr.Write(w, http.StatusServiceUnavailable, fmt.Sprintf("the sandbox has %d connections to its ports open, the most it may", cap(s.tunnels)))
		return
	}
	host, p, err := net.SplitHostPort(r.Host)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil || port < 1 || port > 65535 {
		envderr.Write(w, http.StatusBadRequest, "CONNECT needs 127.0.0.1:<port>, got "+strconv.Quote(r.Host))
		return
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		envderr.Write(w, http.StatusForbidden, "CONNECT reaches the sandbox's loopback only, not "+host)
		return
	}
	owner := r.Header.Get(envdapi.HeaderPortOwner)
	// A port whose owner is checked is reached over IPv4 only: its
	// server listens there (gVisor lists IPv4 sockets with their uid, but
	// has no table of IPv6 ones), and a process of another uid that holds
	// only the IPv6 port must not be fallen back to (review 32, round 3).
	upstream, err := dialLoopback(r.Context(), port, owner == "")
	if err != nil {
		envderr.Write(w, http.StatusBadGateway, "port "+p+" is not open in the sandbox: "+err.Error())
		return
	}
	if owner != "" {
		uid, found := listenerOwner(upstream)
		// Not found where the kernel lists every socket (Linux: both
		// tables), or for a user's port (the code interpreter's, whose
		// IPv4 listener gVisor lists too): refused, not waved through.
		// On gVisor, which lists no IPv6 socket, not found means one
		// accepted the connection, whatever IPv4 listener the port also
		// has (review 32, rounds 4 to 6). Root's port (the MCP gateway's,
		// dual-stack) passes there unchecked.
		if !found && (tablesComplete() || owner != "root") {
			upstream.Close()
			envderr.Write(w, http.StatusBadGateway, fmt.Sprintf("port %s is not open in the sandbox: its listener's owner cannot be told, and it must be %s's", p, owner))
			return
		}
		if found && !s.ownerAllowed(owner, uid) {
			upstream.Close()
			envderr.Write(w, http.StatusBadGateway, fmt.Sprintf("port %s is not open in the sandbox: its listener is uid %d's, not %s's", p, uid, owner))
			return
		}
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		upstream.Close()
		envderr.Write(w, http.StatusHTTPVersionNotSupported, "CONNECT needs HTTP/1.1")
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		conn.Close()
		upstream.Close()
		return
	}
	// Bytes the client sent right after its CONNECT may already sit in the
	// server's read buffer.
	var client io.Reader = conn
	if n := buf.Reader.Buffered(); n > 0 {
		b, _ := buf.Reader.Peek(n)
		client = io.MultiReader(bytes.NewReader(bytes.Clone(b)), conn)
	}
	// A service that neither reads nor closes holds a tunnel whose host
	// side has gone only for the linger time (review 3: 5200 requests to
	// such a port left envd at its open-file limit, and every later
	// command failed with "pipe2: too many open files").
	splice.Join(conn, client, upstream, nil, s.linger)
}

// dialLoopback connects to a port on the sandbox's loopback, IPv4 first:
// a service may listen on 0.0.0.0, 127.0.0.1, :: or ::1 (with v6, ::1 is
// tried when IPv4 fails).
func dialLoopback(ctx context.Context, port int, v6 bool) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	p := strconv.Itoa(port)
	conn, err := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", p))
	if err == nil || !v6 {
		return conn, err
	}
	if conn, err6 := d.DialContext(ctx, "tcp6", net.JoinHostPort("::1", p)); err6 == nil {
		return conn, nil
	}
	return nil, err
}

// tablesComplete reports whether the kernel lists every TCP socket, IPv4
// and IPv6, in /proc/net/tcp and tcp6 (Linux does; gVisor has no tcp6, and
// an IPv4 connection a dual-stack listener accepted is in neither there).
func tablesComplete() bool {
	_, err4 := os.Stat("/proc/net/tcp")
	_, err6 := os.Stat("/proc/net/tcp6")
	return err4 == nil && err6 == nil
}

// listenerOwner finds the uid that owns the far end of a loopback
// connection (the socket the listener accepted, which is the listener's)
// in the kernel's socket tables, /proc/net/tcp and tcp6, which name each
// socket by its two addresses. found is false when the table has no such
// socket (it closed already, or a kernel that does not list it: gVisor's
// IPv6 sockets). Written here: no library reads these tables by address.
func listenerOwner(c net.Conn) (uid int, found bool) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, false
	}
	// The far end's row: its local address is our remote one. An IPv4
	// connection accepted by a listener on "::" (dual-stack) is in tcp6,
	// its addresses IPv4-mapped.
	for _, table := range []struct {
		path string
		v6   bool
	}{{"/proc/net/tcp", false}, {"/proc/net/tcp6", true}} {
		if !table.v6 && remote.IP.To4() == nil {
			continue
		}
		want := procAddr(remote, table.v6) + " " + procAddr(local, table.v6)
		b, err := os.ReadFile(table.path)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			// The accepted socket is established (or, with deferred
			// accept, SYN_RECV); a closed one's TIME_WAIT row has uid 0.
			if len(f) < 8 || f[1]+" "+f[2] != want || (f[3] != "01" && f[3] != "03") {
				continue
			}
			n, err := strconv.Atoi(f[7])
			return n, err == nil
		}
	}
	return 0, false
}

// procAddr writes an address as /proc/net/tcp (v6: tcp6) does: the
// address's 32-bit words in host order (little-endian here), in hex, then
// the port; an IPv4 address in tcp6 is IPv4-mapped.
func procAddr(a *net.TCPAddr, v6 bool) string {
	ip := a.IP.To4()
	if ip == nil || v6 {
		ip = a.IP.To16()
	}
	var sb strings.Builder
	for i := 0; i+4 <= len(ip); i += 4 {
		fmt.Fprintf(&sb, "%08X", binary.LittleEndian.Uint32(ip[i:i+4]))
	}
	fmt.Fprintf(&sb, ":%04X", a.Port)
	return sb.String()
}

// ownerAllowed reports whether uid may own the listener of a port whose
// owner must be root or the user named owner (HeaderPortOwner). A name
// the sandbox's /etc/passwd lacks allows root alone.
func (s *Server) ownerAllowed(owner string, uid int) bool {
	if uid == 0 {
		return true
	}
	if owner == "root" {
		return false
	}
	u, err := permissions.LookupIn(s.root, owner)
	return err == nil && int(u.UID) == uid
}
