// Command casegen writes the generated per-checkpoint tests (cases_*.go) into the current
// directory, the module root under go generate; with -list it prints every case, its stage
// subtests and its command instead, writing nothing.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/mediaqual/mediaqual/internal/casegen"
)

func main() {
	fs := flag.NewFlagSet("casegen", flag.ExitOnError)
	list := fs.Bool("list", false, "print every case, its stage subtests and its command (make list); write nothing")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: go run ./cmd/casegen [-list]

Writes the generated tests, one per inventory row (cases_test.go, cases_gpu_test.go,
cases_nogpu_test.go), into the current directory: run it as go generate . in the module root.
`)
		fs.PrintDefaults()
	}
	fs.Parse(os.Args[1:]) // exits 0 on -h, 2 on an unknown flag
	if fs.NArg() != 0 {
		fs.Usage()
		os.Exit(2)
	}
	if *list {
		casegen.List(os.Stdout) // the dry run: nothing is generated or executed
		return
	}
	files, err := casegen.Files()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for name, src := range files {
		if err := os.WriteFile(name, src, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
