package qualify

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/check/checktest"
	"github.com/mediaqual/mediaqual/reports"
)

// silentEndpoint accepts connections and never answers a byte.
func silentEndpoint(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never read or written
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// An endpoint that accepts connections and never answers fails the serve stage by its
// request deadline, check "deadline", instead of blocking until go test's own timeout.
// Shown failing with exchange's client set back to http.DefaultClient ("the serve stage still waiting
// on a silent endpoint after 30 s").
func TestASilentEndpointFailsByItsDeadline(t *testing.T) {
	e := lookup(t, "ref-t2v")
	cfg := Defaults()
	cfg.Target.Endpoint, cfg.RequestTimeout = silentEndpoint(t), 300*time.Millisecond
	row := NewRow(e)
	c := &caseRun{T: t, Entry: e, Config: cfg, Row: &row, ctx: t.Context()}
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, _, err := c.serve(); done <- err }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the serve stage still waiting on a silent endpoint after 30 s")
	}
	assert.Less(t, time.Since(start), 5*time.Second)
	err = c.deadline("serve", err)
	var f *check.Failure
	require.ErrorAs(t, err, &f)
	checktest.Failed(t, err, "deadline")
	assert.Contains(t, err.Error(), "a request's deadline (300ms: MEDIAQUAL_REQUEST_TIMEOUT) passed")
}

// The case's own deadline names the stage it stopped and where the deadline came from.
func TestCaseDeadlineNamesTheStage(t *testing.T) {
	e := lookup(t, "ref-t2v")
	cfg := Defaults()
	cfg.CaseTimeout = time.Millisecond
	row := reports.Row{}
	ctx, cancel := context.WithTimeoutCause(context.Background(), cfg.CaseTimeout, errCaseDeadline)
	defer cancel()
	<-ctx.Done()
	c := &caseRun{T: t, Entry: e, Config: cfg, Row: &row, ctx: ctx}
	err := c.deadline("aiperf", context.Cause(ctx))
	assert.EqualError(t, err, "check deadline: aiperf: the case deadline (1ms: MEDIAQUAL_CASE_TIMEOUT) passed: the case deadline passed")
	assert.NoError(t, c.deadline("aiperf", nil))
}

// Deadlines follow from the row unless overridden: a CPU row's requests get 3 x 20 s, a GPU
// row's 3 x 10 min, times the concurrency.
func TestDeadlinesFromTheRow(t *testing.T) {
	cfg := Defaults()
	d, from := RequestDeadline(lookup(t, "ref-t2v"), cfg)
	assert.Equal(t, time.Minute, d)
	assert.Contains(t, from, "3 x the row's 20s Task budget x concurrency 1")
	cfg.Concurrency = 2
	d, _ = RequestDeadline(lookup(t, "Wan-AI/Wan2.1-T2V-1.3B"), cfg)
	assert.Equal(t, time.Hour, d)
	cfg.RequestTimeout = 5 * time.Second
	d, from = RequestDeadline(lookup(t, "Wan-AI/Wan2.1-T2V-1.3B"), cfg)
	assert.Equal(t, 5*time.Second, d)
	assert.Equal(t, EnvRequestTimeout, from)

	cd, _ := CaseDeadline(lookup(t, "ref-t2v"), Defaults(), 4)
	// Two default loads (10 min and a minute each), 4+1+4+4+2 requests of a minute (the shape
	// probe at two seeds, two influence probes and the concurrency probe's two), 5 min.
	assert.Equal(t, 2*11*time.Minute+15*time.Minute+5*time.Minute, cd)
}

// Every bad duration is refused by name; none silently becomes a default.
func TestBadDeadlinesAreRefused(t *testing.T) {
	for _, env := range []string{EnvRequestTimeout, EnvCaseTimeout} {
		for _, v := range []string{"30", "-1s", "0s", "soon"} {
			t.Setenv(env, v)
			_, err := FromEnv(".", "")
			assert.ErrorContains(t, err, env+"=", "%s=%s", env, v)
		}
		t.Setenv(env, "90s")
		cfg, err := FromEnv(".", "")
		require.NoError(t, err)
		assert.Equal(t, 90*time.Second, max(cfg.RequestTimeout, cfg.CaseTimeout))
		t.Setenv(env, "")
	}
}
