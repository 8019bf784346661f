package harness

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// PrintTitle prints the first lines of every results header: the
// benchmark's title with the date, and the machine.
func PrintTitle(title string) {
	fmt.Printf("%s, %s\n", title, time.Now().Format("2006-01-02 15:04 MST"))
	fmt.Printf("machine: %s\n", Machine())
}

// Revision names the Hutch measured: HUTCH_BENCH_REV when the script set
// it, else the checkout's commit, marked when Hutch's code has
// uncommitted changes (as bench/lib.sh's setup_hutch does), else
// "unknown".
func Revision() string {
	if rev := os.Getenv("HUTCH_BENCH_REV"); rev != "" {
		return rev
	}
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--", "cmd", "internal", "api", "sdk", "go.mod", "go.sum").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		rev += " + uncommitted changes"
	}
	return rev
}
