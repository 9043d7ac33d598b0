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
	"strconv"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
)

// serveOpts are serve's flags.
type serveOpts struct {
	host, dir, ledgerPath, apiKey, engine, layout, fault string
	port, queue, lanes                                   int
	lifetime, pollHold, loadTimeout                      time.Duration
	maxBody                                              int64
	keep                                                 bool
	ids                                                  listFlag
}

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
	fs.IntVar(&o.queue, "queue", 16, "queued jobs per model lane beyond the running one")
	fs.StringVar(&o.ledgerPath, "ledger", "mediaserve-ledger.jsonl", "request ledger file (JSON lines, appended)")
	fs.StringVar(&o.apiKey, "api-key", os.Getenv("MEDIASERVE_API_KEY"), "bearer key required on /v1/* (env MEDIASERVE_API_KEY)")
	fs.Int64Var(&o.maxBody, "max-body", 32<<20, "largest request body in bytes")
	fs.BoolVar(&o.keep, "keep-artifacts", false, "leave artifacts on disk at shutdown")
	fs.IntVar(&o.lanes, "lanes", 0, "lanes per model, each a Task of its own taking jobs from the model's queue (0: one in process; for workers, one per GPU group of CUDA_VISIBLE_DEVICES)")
	fs.StringVar(&o.engine, "engine", "", "run every model that offers the choice with this engine ("+strings.Join(spec.Engines, ", ")+"; default: each row's)")
	fs.StringVar(&o.layout, "layout", os.Getenv("MEDIAQUAL_LAYOUT"), "GPU layout of each Task (single, cfg-2, ulysses-N), one the model's row offers; default: the row's first that fits CUDA_VISIBLE_DEVICES (env MEDIAQUAL_LAYOUT)")
	fs.StringVar(&o.fault, "fault", "", "switch on one deliberately broken behaviour, for the suite's self-test only (docs/FAULTS.md)")
	fs.DurationVar(&o.loadTimeout, "load-timeout", 0, "how long a model's load may take (default: from its row or bundle size; env MEDIAQUAL_LOAD_TIMEOUT)")
	fs.Var(&o.ids, "model", "checkpoint id to serve (repeatable; default: every servable checkpoint)")
	return fs, o
}

func serve(args []string, stderr io.Writer, log *slog.Logger) error {
	fs, o := serveFlags(stderr)
	if err := parse(fs, args); err != nil {
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
		f, err := os.OpenFile(o.ledgerPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		defer f.Close()
		ledger = f
	}
	ms, err := buildModels(cps, o.engine, spec.Layout(o.layout), log, o.loadTimeout, o.lanes)
	if err != nil {
		return err
	}
	srv, err := server.New(server.Config{
		Models: ms, ArtifactDir: artifactDir, Lifetime: o.lifetime, PollHold: o.pollHold, QueueCapacity: o.queue,
		Ledger: ledger, APIKey: o.apiKey, MaxBodyBytes: o.maxBody, KeepArtifacts: o.keep, Log: log, Fault: o.fault,
	})
	if err != nil {
		return err
	}
	defer srv.Close()

	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return err
	}
	// Listening starts before loading so /health answers and /ready says 503 while weights load.
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
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
