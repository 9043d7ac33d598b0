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
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mergereports:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mergereports", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "directory to write the merged report into (required)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mergereports -out DIR shard1/results.json shard2/results.json ...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		fs.Usage()
		return errors.New("need -out and at least one results.json")
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
