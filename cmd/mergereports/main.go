// Command mergereports combines the reports of shards (parts of one qualification run on
// different machines, e.g. a GPU matrix) into one report directory:
//
//	go run ./cmd/mergereports -out DIR shard1/results.json shard2/results.json ...
//
// It writes DIR/results.json, DIR/results.md and DIR/index.html and copies each shard's
// pictures (the files its rows name, relative to the shard's results.json) into DIR,
// under shard-<n>/ when two shards have different files at one path. A checkpoint reported
// by two shards with different results, or shards whose inventories differ, is an error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/mediaqual/mediaqual/reports"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp): // -h: the usage, printed
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "mergereports:", err)
		os.Exit(1)
	}
}

// errUsage is a command line run cannot use; the usage says why.
var errUsage = errors.New("usage")

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mergereports", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "directory to write the merged report into (required)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: go run ./cmd/mergereports -out DIR shard1/results.json shard2/results.json ...

Merges the shards' reports into DIR (results.json, results.md, index.html and the pictures).`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage // the flag package said what was wrong, and printed the usage
	}
	if *out == "" || fs.NArg() == 0 {
		fmt.Fprintln(stderr, "mergereports: need -out and at least one results.json")
		fs.Usage()
		return errUsage
	}
	paths, err := reports.MergeFiles(*out, fs.Args()...)
	if err != nil {
		return err
	}
	for _, p := range paths {
		fmt.Fprintln(stdout, "report:", p)
	}
	return nil
}
