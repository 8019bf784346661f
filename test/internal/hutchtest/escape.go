package hutchtest

import (
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hutch-sandbox/hutch/internal/testenv/ocitest"
)

// ProcessScan is a Python program for escape tests: it lists every
// process a sandbox can see and prints whether one with argv element $M is
// among them (in /proc, "marker-in-proc: [pids]", and in ps,
// "marker-in-ps: True|False"), and whether its own control process
// (sleep $C) is, which proves the scan itself works ("control-seen: True").
const ProcessScan = `
import os, subprocess, time
m, c = os.environ["M"], os.environ["C"]
ctl = subprocess.Popen(["sleep", c])
for _ in range(300):  # until the control's exec has set its argv
    pids, hits, ctl_seen = [], [], False
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        pids.append(int(d))
        try:
            argv = open(f"/proc/{d}/cmdline", "rb").read().decode().split("\0")
        except OSError:
            continue
        if m in argv:
            hits.append(d)
        if c in argv:
            ctl_seen = True
    if ctl_seen:
        break
    time.sleep(0.01)
ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
ctl.kill()
print("control-seen:", ctl_seen and c in ps)
print("marker-in-proc:", hits)
print("marker-in-ps:", m in ps)
print("pid-count:", len(pids))
`

// HostileImage is an image layer an attacker serves that climbs out of
// the directory it is unpacked in, and the reason Hutch's build gives for
// refusing it.
type HostileImage struct {
	Name    string
	Layer   func(testing.TB) v1.Layer
	Refusal string
}

// HostileImages are ocitest's escaping layers with Hutch's refusals.
func HostileImages() []HostileImage {
	return []HostileImage{
		{"dotdot", ocitest.DotDotLayer, `layer entry "../../etc/evil": climbs out of the root with ".."`},
		{"absolute", ocitest.AbsolutePathLayer, `layer entry "/etc/evil": is an absolute path`},
		{"symlink-escape", ocitest.SymlinkEscapeLayer, `layer entry "x": symlink to "../../../../etc" points outside the root`},
		{"hardlink-escape", ocitest.HardlinkEscapeLayer, `layer entry "shadow": hard link target climbs out of the root with ".."`},
	}
}
