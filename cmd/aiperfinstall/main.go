// Command aiperfinstall creates or checks the pinned AIPerf virtualenv (make aiperf), so
// tests find it ready. It prints the virtualenv and the installed version.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/mediaqual/mediaqual/harness/aiperf"
)

func main() {
	fs := flag.NewFlagSet("aiperfinstall", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: go run ./cmd/aiperfinstall

Creates the virtualenv of the pinned AIPerf (aiperf==%s from PyPI, about 1 GB) or checks
the one there, and prints where it is and the version its metadata reports. Where: $%s,
else .cache/aiperf-%s in the current directory when that exists (make's link), else
aiperf-%s under $VENV_CACHE, $XDG_CACHE_HOME/mediaqual or ~/.cache/mediaqual.
`, aiperf.Version, aiperf.EnvVenv, aiperf.Version, aiperf.Version)
	}
	fs.Parse(os.Args[1:]) // exits 0 on -h, 2 on an unknown flag
	if fs.NArg() != 0 {
		fs.Usage()
		os.Exit(2)
	}
	root, err := os.Getwd()
	if err == nil {
		var env aiperf.Env
		env, err = aiperf.Ensure(context.Background(), aiperf.DefaultVenv(root), os.Stderr)
		if err == nil {
			fmt.Printf("aiperf %s in %s\n", env.Version, env.Venv)
			return
		}
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
