package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
)

// serveOpts are serve's flags.
type serveOpts struct {
	host, dir, ledgerPath, apiKey, apiKeyFile, publicURL, engine, layout, fault string
	port, queue, lanes, maxJobs, maxConns                                       int
	lifetime, pollHold, loadTimeout, jobTimeout                                 time.Duration
	maxBody, memBudget, maxArtifacts, maxLedger                                 int64
	keep                                                                        bool
	ids                                                                         listFlag
}

// envAPIKey is where the key may come from instead of a flag; serve removes it from its own
// environment once read, so no child (ffmpeg, a worker) inherits it.
const envAPIKey = "MEDIASERVE_API_KEY"

// serveFlags is serve's flag set, whose usage (to out) names both subcommands. README's
// mediaserve flag list is held to it (TestReadmeListsEveryFlag).
func serveFlags(out io.Writer) (*flag.FlagSet, *serveOpts) {
	o := &serveOpts{}
	fs := flag.NewFlagSet("mediaserve", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, `usage: mediaserve [serve] [flags]           serve checkpoints over HTTP (docs/API.md)
       mediaserve task -model <id> [flags]  run one native Task without HTTP (mediaserve task -h)

serve's flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&o.port, "port", 8000, "port to listen on (0 picks a free one)")
	fs.StringVar(&o.dir, "artifact-dir", "", "where artifacts live (default: a temporary directory removed at exit)")
	fs.DurationVar(&o.lifetime, "lifetime", time.Hour, "how long an artifact lives after its job completes")
	fs.DurationVar(&o.pollHold, "poll-hold", time.Second, "hold a poll of an unfinished video until its status or progress changes, at most this long (0: answer at once)")
	fs.IntVar(&o.queue, "queue", 16, "jobs that may wait in each model's queue, one queue per model shared by its lanes, beyond those running")
	fs.StringVar(&o.ledgerPath, "ledger", "mediaserve-ledger.jsonl", "request ledger file (JSON lines, appended)")
	// The key's flag has no default: a default would be printed by -h and by any mistyped flag.
	fs.StringVar(&o.apiKey, "api-key", "", "bearer key required on /v1/* (default: the file of -api-key-file, else env "+envAPIKey+"; a flag is visible to other local users, prefer those)")
	fs.StringVar(&o.apiKeyFile, "api-key-file", "", "file holding the bearer key (its first line)")
	fs.StringVar(&o.publicURL, "public-url", "", "scheme://host[:port] clients reach the server at, for artifact URLs (default: the address each connection reached; never the request's Host)")
	fs.Int64Var(&o.maxBody, "max-body", 32<<20, "largest request body in bytes (a video request's is at most 1 MiB)")
	fs.Int64Var(&o.memBudget, "memory-budget", server.DefaultMemoryBudget, "bytes requests may make the server hold at once: bodies being parsed, uploads of live jobs, reference decodes (over it: 429 over_memory_budget)")
	fs.IntVar(&o.maxJobs, "max-jobs", 1024, "jobs kept at once, queued, running or finished and not yet expired or deleted (over it: 429 too_many_jobs)")
	fs.Int64Var(&o.maxArtifacts, "max-artifact-bytes", 8<<30, "artifact bytes kept on disk (over it: 507 artifact_storage_full)")
	fs.Int64Var(&o.maxLedger, "max-ledger-bytes", 256<<20, "size of the ledger file past which no new job is accepted (507 ledger_full)")
	fs.DurationVar(&o.jobTimeout, "job-timeout", 15*time.Minute, "how long a job's Task may run at its row's pinned settings, scaled by the steps, frames and pixels asked (past it: failed, job_timeout)")
	fs.IntVar(&o.maxConns, "max-conns", 512, "client connections open for requests, of which uploads may hold 3/4 and one address's uploads 1/4 (over it: 429 too_many_uploads); refusals waiting for their answer and connections closing are held to as many again each (keep 3 times it under the open-file limit)")
	fs.BoolVar(&o.keep, "keep-artifacts", false, "leave artifacts on disk at shutdown")
	fs.IntVar(&o.lanes, "lanes", 0, "lanes per model, each a Task of its own taking jobs from the model's queue (0: one in process; for workers, one per GPU group of CUDA_VISIBLE_DEVICES)")
	fs.StringVar(&o.engine, "engine", "", "run every model that offers the choice with this engine ("+strings.Join(spec.Engines, ", ")+"; default: each row's)")
	fs.StringVar(&o.layout, "layout", os.Getenv("MEDIAQUAL_LAYOUT"), "GPU layout of each Task (single, cfg-2, ulysses-N), one the model's row offers; default: the row's first that fits CUDA_VISIBLE_DEVICES (env MEDIAQUAL_LAYOUT)")
	fs.StringVar(&o.fault, "fault", "", "switch on one deliberately broken behaviour, for the suite's self-test only (docs/FAULTS.md)")
	fs.DurationVar(&o.loadTimeout, "load-timeout", 0, "how long a model's load may take (default: from its row or bundle size; env MEDIAQUAL_LOAD_TIMEOUT)")
	fs.Var(&o.ids, "model", "checkpoint id to serve (repeatable; default: every servable checkpoint)")
	return fs, o
}

func serve(args []string, stderr io.Writer, log *slog.Logger) (err error) {
	fs, o := serveFlags(stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	key, err := apiKey(o)
	if err != nil {
		return err
	}
	cps, err := selectModels(o.ids, log)
	if err != nil {
		return err
	}
	artifactDir := o.dir
	if artifactDir == "" {
		if artifactDir, err = os.MkdirTemp("", "mediaserve-"); err != nil {
			return err
		}
		if !o.keep {
			defer os.RemoveAll(artifactDir)
		}
	}
	var ledger io.Writer = io.Discard
	if o.ledgerPath != "" {
		f, created, oerr := openLedger(o.ledgerPath)
		if oerr != nil {
			return fmt.Errorf("ledger: %w", oerr)
		}
		defer func() {
			// A server that never started leaves no empty ledger behind.
			if st, serr := f.Stat(); err != nil && created && serr == nil && st.Size() == 0 {
				os.Remove(o.ledgerPath)
			}
			f.Close()
		}()
		ledger = f
	}
	ms, err := buildModels(cps, o.engine, spec.Layout(o.layout), log, o.loadTimeout, o.lanes)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		closeAll(ms)
		return err
	}
	defer ln.Close()
	if budget := o.memBudget; os.Getenv("GOMEMLIMIT") == "" && budget > 0 {
		// The collector works harder as the heap nears twice the budget, rather than letting
		// garbage of finished requests grow the process past it.
		debug.SetMemoryLimit(2 * budget)
	}
	srv, err := server.New(server.Config{
		Models: ms, ArtifactDir: artifactDir, Lifetime: o.lifetime, PollHold: o.pollHold, QueueCapacity: o.queue,
		Ledger: ledger, APIKey: key, PublicURL: o.publicURL, MaxBodyBytes: o.maxBody, KeepArtifacts: o.keep, Log: log, Fault: o.fault,
		MemoryBudget: o.memBudget, MaxJobs: o.maxJobs, MaxArtifactBytes: o.maxArtifacts, MaxLedgerBytes: o.maxLedger,
		JobTimeout: o.jobTimeout, MaxConns: o.maxConns,
	})
	if err != nil {
		closeAll(ms)
		return err
	}
	defer srv.Close()

	// Listening starts before loading so /health answers and /ready says 503 while weights load.
	hs := srv.HTTPServer()
	httpErr := make(chan error, 1)
	go func() { httpErr <- hs.Serve(ln) }()
	fmt.Printf("mediaserve listening on http://%s (artifacts in %s)\n", ln.Addr(), artifactDir)

	ctx, stop := signalContext()
	defer stop()
	if err := srv.Load(ctx); err != nil {
		return explainLoad(err, ms, o.loadTimeout)
	}
	if o.fault != "" {
		log.Warn("FAULT INJECTED: this server is deliberately broken", "fault", o.fault, "what", server.Faults[o.fault])
	}
	log.Info("ready", "models", len(ms))
	select {
	case <-ctx.Done():
	case err := <-httpErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	return srv.Close()
}

// apiKey is the bearer key from -api-key, -api-key-file or the environment (in that order;
// two of them is an error), and removes the environment's copy so no child inherits it.
func apiKey(o *serveOpts) (string, error) {
	env := os.Getenv(envAPIKey)
	os.Unsetenv(envAPIKey)
	switch {
	case o.apiKey != "" && o.apiKeyFile != "":
		return "", errors.New("give the key with -api-key or -api-key-file, not both")
	case o.apiKey != "":
		return o.apiKey, nil
	case o.apiKeyFile != "":
		b, err := os.ReadFile(o.apiKeyFile)
		if err != nil {
			return "", fmt.Errorf("-api-key-file: %w", err)
		}
		key, _, _ := strings.Cut(string(b), "\n")
		if key = strings.TrimSpace(key); key == "" {
			return "", fmt.Errorf("-api-key-file %s: the first line is empty", o.apiKeyFile)
		}
		return key, nil
	}
	return env, nil
}

// openLedger opens the ledger for appending and says whether this call created it.
func openLedger(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_APPEND|os.O_WRONLY, 0o644)
	if err == nil {
		return f, true, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return nil, false, err
	}
	f, err = os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o644)
	return f, false, err
}
