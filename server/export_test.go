package server

import "time"

// SetUploadGrace shortens the time a body may take before MinUploadRate applies, for tests.
func SetUploadGrace(d time.Duration) (restore func()) {
	old := uploadGrace
	uploadGrace = d
	return func() { uploadGrace = old }
}

// ExcerptBytes is how much of a client's input a message quotes.
const ExcerptBytes = excerptBytes

// SetLedgerWaiting bounds the bytes a down ledger keeps, for tests.
func SetLedgerWaiting(n int) (restore func()) {
	old := maxWaitingBytes
	maxWaitingBytes = n
	return func() { maxWaitingBytes = old }
}
