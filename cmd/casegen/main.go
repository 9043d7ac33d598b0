// Command casegen writes the generated per-checkpoint tests at the module root (go generate);
// with -list it prints every case, its stage subtests and its command instead.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/mediaqual/mediaqual/internal/casegen"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-list" {
		casegen.List(os.Stdout) // the dry run: nothing is generated or executed
		return
	}
	files, err := casegen.Files()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(root, name), src, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
