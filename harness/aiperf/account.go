package aiperf

import (
	"fmt"
	"strings"

	"github.com/mediaqual/mediaqual/harness/ledger"
)

// Account is the stage's verdict on a run: nil when every request completed and maps to
// exactly one server job, otherwise an error naming each request that did not (the aiperf stage
// fails it as check aiperf-accounting).
func Account(reqs []Request, entries []ledger.Entry) error {
	p := Problems(reqs, entries)
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d requests not accounted as completed (%s):\n  %s",
		len(p), len(reqs), Summarize(reqs), strings.Join(p, "\n  "))
}
