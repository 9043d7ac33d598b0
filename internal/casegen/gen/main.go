// Command gen writes the generated per-checkpoint tests at the module root (go generate).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"mediaqual/internal/casegen"
)

func main() {
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
