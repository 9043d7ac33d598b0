package server

import "time"

// SetUploadGrace shortens the time a body may take before MinUploadRate applies, for tests.
func SetUploadGrace(d time.Duration) (restore func()) {
	old := uploadGrace
	uploadGrace = d
	return func() { uploadGrace = old }
}
