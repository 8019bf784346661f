// Command mkdeb builds the hutch .deb from packaging/nfpm.yaml with nfpm's
// deb packager, used as a library: nfpm's own command links every
// packager, and two of those come from modules the Go module proxy does not
// serve. scripts/package.sh runs it; it is a module of its own so that
// hutch's go.mod does not carry nfpm.
//
//	go run . CONFIG TARGET.deb
package main

import (
	"fmt"
	"os"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: mkdeb CONFIG TARGET.deb")
		os.Exit(2)
	}
	if err := build(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintf(os.Stderr, "mkdeb: %v\n", err)
		os.Exit(1)
	}
}

// build writes the package config describes to target, as `nfpm package
// --packager deb` does.
func build(config, target string) (err error) {
	cfg, err := nfpm.ParseFile(config) // expands ${VAR} from the environment
	if err != nil {
		return fmt.Errorf("%s: %w", config, err)
	}
	info, err := cfg.Get("deb")
	if err != nil {
		return fmt.Errorf("%s: %w", config, err)
	}
	info = nfpm.WithDefaults(info) // the files' times from SOURCE_DATE_EPOCH
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return fmt.Errorf("%s: %w", config, err)
	}
	f, err := os.Create(target)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(target)
		}
	}()
	info.Target = target
	if err := deb.Default.Package(info, f); err != nil {
		return fmt.Errorf("package: %w", err)
	}
	return nil
}
