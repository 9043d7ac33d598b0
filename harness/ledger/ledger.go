// Package ledger reads a server's request ledger (JSON lines, docs/API.md) so the suite can
// account for every request by its identity.
package ledger

import (
	"mediaqual/internal/jsonl"
	"mediaqual/server"
)

// Entry is one ledger line, in the shape mediaserve writes.
type Entry = server.LedgerEntry

// Timing is a job's time split into its parts.
type Timing = server.Timing

// Read parses the ledger at path; blank lines are skipped, anything else malformed is an error.
func Read(path string) ([]Entry, error) { return jsonl.Read[Entry](path) }

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
