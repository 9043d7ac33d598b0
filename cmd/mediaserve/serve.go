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
	"time"

	"mediaqual/models/spec"
	"mediaqual/server"
)

func serve(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("mediaserve", flag.ContinueOnError)
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 8000, "port to listen on (0 picks a free one)")
	dir := fs.String("artifact-dir", "", "where artifacts live (default: a temporary directory removed at exit)")
	lifetime := fs.Duration("lifetime", time.Hour, "how long an artifact lives after its job completes")
	pollHold := fs.Duration("poll-hold", time.Second, "hold a poll of an unfinished video until its status or progress changes, at most this long (0: answer at once)")
	queue := fs.Int("queue", 16, "queued jobs per model lane beyond the running one")
	ledgerPath := fs.String("ledger", "mediaserve-ledger.jsonl", "request ledger file (JSON lines, appended)")
	apiKey := fs.String("api-key", os.Getenv("MEDIASERVE_API_KEY"), "bearer key required on /v1/* (env MEDIASERVE_API_KEY)")
	maxBody := fs.Int64("max-body", 32<<20, "largest request body in bytes")
	keep := fs.Bool("keep-artifacts", false, "leave artifacts on disk at shutdown")
	lanes := fs.Int("lanes", 0, "lanes per model, each a Task of its own taking jobs from the model's queue (0: one in process; for workers, one per GPU group of CUDA_VISIBLE_DEVICES)")
	engine := fs.String("engine", "", "run every model that offers the choice with this engine (eager, regional-compile; default: each row's)")
	layout := fs.String("layout", os.Getenv("MEDIAQUAL_LAYOUT"), "GPU layout of each Task (single, cfg-2, ulysses-N), one the model's row offers; default: the row's first that fits CUDA_VISIBLE_DEVICES (env MEDIAQUAL_LAYOUT)")
	fault := fs.String("fault", "", "switch on one deliberately broken behaviour, for the suite's self-test only (docs/FAULTS.md)")
	loadFlag := fs.Duration("load-timeout", 0, "how long a model's load may take (default: from its row or bundle size; env MEDIAQUAL_LOAD_TIMEOUT)")
	var ids listFlag
	fs.Var(&ids, "model", "checkpoint id to serve (repeatable; default: every servable checkpoint)")
	if err := fs.Parse(args); err != nil {
		return err
	}

	cps, err := selectModels(ids, log)
	if err != nil {
		return err
	}
	artifactDir := *dir
	if artifactDir == "" {
		if artifactDir, err = os.MkdirTemp("", "mediaserve-"); err != nil {
			return err
		}
		if !*keep {
			defer os.RemoveAll(artifactDir)
		}
	}
	var ledger io.Writer = io.Discard
	if *ledgerPath != "" {
		f, err := os.OpenFile(*ledgerPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		defer f.Close()
		ledger = f
	}
	ms, err := buildModels(cps, *engine, spec.Layout(*layout), log, *loadFlag, *lanes)
	if err != nil {
		return err
	}
	srv, err := server.New(server.Config{
		Models: ms, ArtifactDir: artifactDir, Lifetime: *lifetime, PollHold: *pollHold, QueueCapacity: *queue,
		Ledger: ledger, APIKey: *apiKey, MaxBodyBytes: *maxBody, KeepArtifacts: *keep, Log: log, Fault: *fault,
	})
	if err != nil {
		return err
	}
	defer srv.Close()

	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
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
		return explainLoad(err, ms, *loadFlag)
	}
	if *fault != "" {
		log.Warn("FAULT INJECTED: this server is deliberately broken", "fault", *fault, "what", server.Faults[*fault])
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
