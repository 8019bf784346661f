// Package envdapi is envd's wire contract as the host sees it: the port
// and the version Hutch's envd reports, the headers it reads, the body of
// POST /init, the signed-URL scheme of /files, its error body, the command
// line that starts it in a sandbox, and a small typed client for the calls
// the host makes to a new sandbox's envd.
//
// The daemon (internal/envd) and everything that talks to it (the sandbox
// manager, the edge router, the E2B adapter, the Go SDK) share this
// package, so none of them links the daemon.
package envdapi

import "strconv"

// Port is envd's port: where E2B's SDKs send requests for envd (the
// E2b-Sandbox-Port of its requests, the "49983-" of its host names), and
// envd's TCP port inside the sandbox.
const Port = 49983

// Version is the envd protocol version Hutch's envd reports (the
// envdVersion of a created sandbox). The SDKs gate features on it (spec
// §3.10), so it is only as high as what is really implemented: everything
// gated up to 0.6.4 is (stdin close, octet-stream and gzip uploads, file
// metadata, includeEntry, allowNetworkMounts).
const Version = "0.6.4"

// HeaderAccessToken carries envd's access token on every request once the
// sandbox has one.
const HeaderAccessToken = "X-Access-Token"

// HeaderPortOwner, on the host's CONNECT to a port, asks envd to tunnel
// only to a listener the sandbox's root owns, or one of the users it names
// ("root", or a user name of the sandbox's /etc/passwd): the MCP gateway's
// port must be root's, the code interpreter's root's or its user's, so
// that another uid that took the port after their server died does not
// receive their clients' calls (and the access token in them).
const HeaderPortOwner = "Hutch-Port-Owner"

// DefaultPath is a sandbox's PATH when its template sets none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// InitRequest is POST /init's body: the sandbox-wide settings the host
// gives a new sandbox's envd (fields envd does not use are ignored).
type InitRequest struct {
	// AccessToken, when not nil, becomes the token every later request
	// must carry ("" for none).
	AccessToken    *string           `json:"accessToken"`
	EnvVars        map[string]string `json:"envVars,omitempty"`
	DefaultUser    string            `json:"defaultUser,omitempty"`
	DefaultWorkdir string            `json:"defaultWorkdir,omitempty"`
	// CABundle is PEM text of CA certificates every program in the
	// sandbox is to trust beside the system's (E2B's field name): envd
	// installs them (cabundle.Install) before it answers, and the
	// environment they need becomes the default of every command, under
	// EnvVars. "" installs nothing.
	CABundle string `json:"caBundle,omitempty"`
}

// Error is the body of envd's REST errors (/files, /init, /envs, CONNECT).
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// The descriptors envd finds its host sockets at in a sandbox.
const (
	// ControlFD is the listening control socket only the host dials: POST
	// /init and CONNECT tunnels are served there alone.
	ControlFD = 3
	// APIFD is the listening API socket the edge router dials for
	// clients' requests.
	APIFD = 4
)

// Command returns the argv that starts envd in a sandbox, with its host
// sockets at ControlFD and APIFD: self is the hutch binary as the sandbox
// sees it, defaultUser the user of requests that name none.
func Command(self, defaultUser string) []string {
	return []string{self, "envd", "--control-fd", strconv.Itoa(ControlFD), "--api-fd", strconv.Itoa(APIFD), "--user", defaultUser}
}
