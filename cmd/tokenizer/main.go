// Command tokenizer writes a copy of the suite's local tokenizer (fixtures/tokenizer, embedded)
// into a directory: for AIPerf by hand outside a clone of this repository (inside one, pass
// fixtures/tokenizer itself).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/mediaqual/mediaqual/fixtures"
)

func main() {
	fs := flag.NewFlagSet("tokenizer", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: go run ./cmd/tokenizer DIR

Writes the suite's local tokenizer (a word-level tokenizer over the fixtures' vocabulary;
AIPerf uses it only to count input tokens) into DIR, creating it, and prints DIR. In a clone
of this repository, give AIPerf fixtures/tokenizer itself instead.
`)
	}
	fs.Parse(os.Args[1:]) // exits 0 on -h, 2 on an unknown flag
	if fs.NArg() != 1 {
		fs.Usage()
		os.Exit(2)
	}
	dir, err := fixtures.WriteTokenizer(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(dir)
}
