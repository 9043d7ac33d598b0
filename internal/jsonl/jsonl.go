// Package jsonl reads JSON-lines files (ledgers, AIPerf exports), one value a line.
package jsonl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Read decodes every line of path into a T; blank lines are skipped, a malformed line is an
// error naming the file and line. Lines may be large: raw AIPerf records carry whole images.
func Read[T any](path string) ([]T, error) { return read[T](path, false) }

// ReadStrict is Read for input a person writes: a field T does not know is an error, not
// silently dropped.
func ReadStrict[T any](path string) ([]T, error) { return read[T](path, true) }

func read[T any](path string, strict bool) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var v T
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		if strict {
			dec.DisallowUnknownFields()
		}
		err := dec.Decode(&v)
		if err == nil && dec.More() {
			err = errors.New("more than one JSON value on the line")
		}
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", filepath.Base(path), n, err)
		}
		out = append(out, v)
	}
	return out, sc.Err()
}
