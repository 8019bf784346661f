package e2bapi

import (
	"strings"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
)

// Size limits of the maps and strings in requests. The spec sets none; these
// are Hutch's, generous enough for any SDK use and small enough that one
// request cannot bloat the database or a sandbox's environment. Every
// violation is a 400 naming the field.
const (
	// MaxTemplateIDLen is the longest templateID, in bytes.
	MaxTemplateIDLen = 256
	// MaxMetadataEntries is the most keys metadata may have.
	MaxMetadataEntries = 100
	// MaxMetadataKeyLen is the longest metadata key, in bytes.
	MaxMetadataKeyLen = 256
	// MaxMetadataValueLen is the longest metadata value, in bytes.
	MaxMetadataValueLen = 4096
	// MaxEnvVars is the most keys envVars may have.
	MaxEnvVars = 1000
	// MaxEnvKeyLen is the longest environment variable name, in bytes.
	MaxEnvKeyLen = 1024
	// MaxEnvValueLen is the longest environment variable value, in bytes
	// (Linux's per-string exec limit, MAX_ARG_STRLEN, is 128 KiB).
	MaxEnvValueLen = 128 << 10
	// MaxNetworkEntries is the most entries allowOut, denyOut and
	// httpsPorts may each have.
	MaxNetworkEntries = 1000
)

// ValidateTimeout checks a lifetime in seconds: 0..[MaxTimeout]. field names
// the JSON field in the error. 0 is accepted (the spec's minimum); what it
// means is the endpoint's: a create takes it as the default lifetime, POST
// /sandboxes/{id}/timeout expires the sandbox at once, and connect leaves
// a later expiry as it is. The error is a 400 [*StatusError].
func ValidateTimeout(field string, seconds int32) error {
	if seconds < 0 {
		return BadRequestf("%s: must not be negative, got %d", field, seconds)
	}
	if seconds > MaxTimeout {
		return BadRequestf("%s: must be at most %d seconds (24 hours), got %d", field, MaxTimeout, seconds)
	}
	return nil
}

// ValidateTemplateID checks a templateID after defaulting: non-empty, at most
// [MaxTemplateIDLen] bytes, no whitespace or control characters. Whether the
// template exists is the handler's business.
func ValidateTemplateID(id string) error {
	switch {
	case id == "":
		return BadRequest("templateID: must not be empty")
	case len(id) > MaxTemplateIDLen:
		return BadRequestf("templateID: longer than %d bytes", MaxTemplateIDLen)
	case strings.IndexFunc(id, func(r rune) bool { return r <= ' ' || r == 0x7f || r == utf8.RuneError }) >= 0:
		return BadRequestf("templateID: %q contains whitespace or control characters", id)
	}
	return nil
}

// ValidateMetadata checks the metadata map: at most [MaxMetadataEntries]
// keys, each non-empty and at most [MaxMetadataKeyLen] bytes, values at most
// [MaxMetadataValueLen] bytes. A nil map is valid.
func ValidateMetadata(m map[string]string) error {
	if len(m) > MaxMetadataEntries {
		return BadRequestf("metadata: more than %d keys (%d)", MaxMetadataEntries, len(m))
	}
	for k, v := range m {
		switch {
		case k == "":
			return BadRequest("metadata: keys must not be empty")
		case len(k) > MaxMetadataKeyLen:
			return BadRequestf("metadata: key %.32q... is longer than %d bytes", k, MaxMetadataKeyLen)
		case len(v) > MaxMetadataValueLen:
			return BadRequestf("metadata: value of %q is longer than %d bytes", k, MaxMetadataValueLen)
		}
	}
	return nil
}

// ValidateEnvVars checks the envVars map: at most [MaxEnvVars] keys; each key
// non-empty, at most [MaxEnvKeyLen] bytes, without '=' or NUL; each value at
// most [MaxEnvValueLen] bytes, without NUL (exec cannot carry one). A nil
// map is valid.
func ValidateEnvVars(m map[string]string) error {
	if len(m) > MaxEnvVars {
		return BadRequestf("envVars: more than %d variables (%d)", MaxEnvVars, len(m))
	}
	for k, v := range m {
		switch {
		case k == "":
			return BadRequest("envVars: names must not be empty")
		case len(k) > MaxEnvKeyLen:
			return BadRequestf("envVars: name %.32q... is longer than %d bytes", k, MaxEnvKeyLen)
		case strings.ContainsAny(k, "=\x00"):
			return BadRequestf("envVars: name %q must not contain '=' or NUL", k)
		case len(v) > MaxEnvValueLen:
			return BadRequestf("envVars: value of %q is longer than %d bytes", k, MaxEnvValueLen)
		case strings.IndexByte(v, 0) >= 0:
			return BadRequestf("envVars: value of %q must not contain NUL", k)
		}
	}
	return nil
}

// Validate checks the shape of a network configuration: the egress rules
// (see [ValidateEgressRules]), httpsPorts in 1..65535, and a
// maskRequestHost that is a valid Host header once "${PORT}" is replaced.
// Whether an entry is a valid address or host is left to the network
// layer.
func (n *NetworkConfig) Validate() error {
	if err := ValidateEgressRules("network.", n.AllowOut, n.DenyOut); err != nil {
		return err
	}
	if len(n.HTTPSPorts) > MaxNetworkEntries {
		return BadRequestf("network.httpsPorts: more than %d entries", MaxNetworkEntries)
	}
	for i, p := range n.HTTPSPorts {
		if p < 1 || p > 65535 {
			return BadRequestf("network.httpsPorts[%d]: %d is not a port (1-65535)", i, p)
		}
	}
	if h := n.MaskRequestHost; h != nil {
		if *h == "" || len(*h) > MaxHostLen || !httpguts.ValidHostHeader(strings.ReplaceAll(*h, "${PORT}", "1")) {
			return BadRequestf("network.maskRequestHost: %.64q is not a host[:port] (\"${PORT}\" stands for the port)", *h)
		}
	}
	return nil
}

// MaxHostLen is the longest maskRequestHost, in bytes (a DNS name's 253
// and a port).
const MaxHostLen = 260

// ValidateEgressRules checks allowOut and denyOut, in a create's network
// object (prefix "network.") or an update's body (prefix ""): at most
// [MaxNetworkEntries] entries each, none empty. Each entry costs the host
// firewall rules, so an update is held to the create's bound.
func ValidateEgressRules(prefix string, allowOut, denyOut []string) error {
	for _, l := range []struct {
		name string
		list []string
	}{{prefix + "allowOut", allowOut}, {prefix + "denyOut", denyOut}} {
		if len(l.list) > MaxNetworkEntries {
			return BadRequestf("%s: more than %d entries", l.name, MaxNetworkEntries)
		}
		for i, e := range l.list {
			if strings.TrimSpace(e) == "" {
				return BadRequestf("%s[%d]: must not be empty", l.name, i)
			}
		}
	}
	return nil
}
