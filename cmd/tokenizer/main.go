// Command tokenizer writes the suite's local tokenizer (fixtures/tokenizer) into a directory,
// for running AIPerf by hand without a model hub.
package main

import (
	"fmt"
	"os"

	"github.com/mediaqual/mediaqual/fixtures"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run ./cmd/tokenizer DIR")
		os.Exit(2)
	}
	dir, err := fixtures.WriteTokenizer(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(dir)
}
