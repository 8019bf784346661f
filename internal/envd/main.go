package envd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/hutch-sandbox/hutch/internal/envdapi"
)

// Main runs envd with its command line (the arguments after "envd", as
// envdapi.Command writes them) until ctx ends. Both binaries that run
// inside sandboxes (hutch and hutch-sandbox) call it, so the flags are
// parsed the same in each. Usage and errors go to stderr.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("envd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	controlFD := fs.Int("control-fd", envdapi.ControlFD, "descriptor of the host's listening control socket (POST /init, tunnels)")
	apiFD := fs.Int("api-fd", -1, "descriptor of the host's listening API socket (-1: none)")
	listen := fs.String("listen", "0.0.0.0:"+strconv.Itoa(envdapi.Port), "TCP address inside the sandbox (empty: none)")
	user := fs.String("user", "user", "default user of requests that name none")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("envd: unexpected arguments %q", fs.Args())
	}
	return Run(ctx, Options{DefaultUser: *user, Logger: NewLogger(stderr)}, *controlFD, *apiFD, *listen)
}
