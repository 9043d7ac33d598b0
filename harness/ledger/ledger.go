// Package ledger reads a server's request ledger (JSON lines, docs/API.md) so the suite can
// account for every request by its identity.
package ledger

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"mediaqual/server"
)

// Entry is one ledger line, in the shape mediaserve writes.
type Entry = server.LedgerEntry

// Read parses the ledger at path; blank lines are skipped, anything else malformed is an error.
func Read(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("ledger %s line %d: %w", path, n, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// Terminal returns the terminal job lines ("job" events) of requestID.
func Terminal(entries []Entry, requestID string) []Entry {
	var out []Entry
	for _, e := range entries {
		if e.Event == "job" && e.RequestID == requestID {
			out = append(out, e)
		}
	}
	return out
}
