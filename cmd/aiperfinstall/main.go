// Command aiperfinstall creates or checks the pinned AIPerf virtualenv (make aiperf), so
// tests find it ready. It prints the virtualenv and the installed version.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/mediaqual/mediaqual/harness/aiperf"
)

func main() {
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
