// Command mediaserve serves media-generation checkpoints over an OpenAI-compatible API
// (docs/API.md) and runs single native Tasks without HTTP (`mediaserve task`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mediaqual/mediaqual/models"
	"github.com/mediaqual/mediaqual/models/bundle"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
	"github.com/mediaqual/mediaqual/server/worker"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr, slog.New(slog.NewTextHandler(os.Stderr, nil))))
}

// run is mediaserve with args and returns its exit status: `task` runs native Tasks, `serve`
// (or no subcommand) serves, -h prints the usage and exits 0, and any other first word is
// refused by name, so a mistyped subcommand never starts a server.
func run(args []string, stderr io.Writer, log *slog.Logger) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(args, stderr, log)
	case "task":
		err = runTask(args, stderr, log)
	case "help":
		fs, _ := serveFlags(stderr)
		fs.Usage()
		return 0
	default:
		fmt.Fprintf(stderr, "mediaserve: unknown subcommand %q: the subcommands are serve (the default) and task; mediaserve -h says more\n", cmd)
		return 2
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2 // the flag package has printed what is wrong and the usage
	case err != nil:
		fmt.Fprintln(stderr, "mediaserve:", err)
		return 1
	}
	return 0
}

// errUsage is a command line the flag package refused and has already explained.
var errUsage = errors.New("usage")

// parse parses args into fs and refuses words left after the flags (a subcommand or value
// in the wrong place would otherwise be ignored).
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: %s takes only flags (%s -h lists them)", fs.Arg(0), fs.Name(), fs.Name())
	}
	return nil
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// buildModel makes the Tasks for a checkpoint, one per lane: in process when the family is Go,
// otherwise long-lived worker processes, which must be ready within loadTimeout. engine, when
// set, replaces the row's engine (e.g. eager for a compiled row); layout, when set, is the
// GPU layout to run instead of the first of the row's that fits (withLayout). lanes is how
// many lanes (0: one in process, or as many worker lanes as the visible GPUs hold).
func buildModel(cp spec.Checkpoint, engine string, layout spec.Layout, log *slog.Logger, loadTimeout time.Duration, lanes int) (server.Model, error) {
	cp, err := withEngine(cp, engine)
	if err != nil {
		return server.Model{}, err
	}
	visible := os.Getenv("CUDA_VISIBLE_DEVICES")
	if cp, err = withLayout(cp, layout, visible); err != nil {
		return server.Model{}, err
	}
	if cp.NewTask != nil {
		var tasks []spec.Task
		for range max(1, lanes) {
			t, err := cp.NewTask()
			if err != nil {
				return server.Model{}, err
			}
			tasks = append(tasks, t)
		}
		return server.Model{Checkpoint: cp, Runtime: "in-process", Task: tasks[0], Replicas: tasks[1:]}, nil
	}
	if len(cp.Worker) == 0 {
		return server.Model{}, fmt.Errorf("%s has neither an in-process Task nor a worker command", cp.ID)
	}
	groups, err := laneDevices(cp.ID, visible, perTask(cp), lanes)
	if err != nil {
		return server.Model{}, err
	}
	var tasks []spec.Task
	var devices []string
	for i, g := range groups {
		cfg := worker.Config{
			// No ScratchDir: the worker's per-job files go to a private temporary directory
			// that Close removes, never into the artifact directory.
			Argv:        workerArgv(cp),
			Log:         slogWriter{log.With("worker", cp.ID, "lane", i)},
			LoadTimeout: loadTimeout,
		}
		if g != "" {
			cfg.Env = []string{"CUDA_VISIBLE_DEVICES=" + g}
			devices = append(devices, g)
		}
		tasks = append(tasks, worker.New(cfg))
	}
	return server.Model{Checkpoint: cp, Runtime: "worker", Task: tasks[0], Replicas: tasks[1:], Devices: devices}, nil
}

// perTask is how many GPUs one of cp's Tasks uses: its layout's degree when the row offers
// layouts, else its GPU needs.
func perTask(cp spec.Checkpoint) int {
	if len(cp.Layouts) > 0 {
		return cp.Layout.Degree()
	}
	return gpusPerTask(cp.ID)
}

// gpusPerTask is how many GPUs one of the row's Tasks uses (its GPU needs; 1 without).
func gpusPerTask(id string) int {
	if e, err := models.Lookup(id); err == nil && e.GPU != nil && e.GPU.Count > 0 {
		return e.GPU.Count
	}
	return 1
}

// laneDevices splits the visible GPUs into one group of perTask ids per lane, at most lanes of
// them (0: as many as fit). No visible list is one lane on whatever the worker finds.
func laneDevices(id, visible string, perTask, lanes int) ([]string, error) {
	if strings.TrimSpace(visible) == "" {
		return []string{""}, nil
	}
	ids := strings.Split(visible, ",")
	if len(ids) < perTask {
		return nil, fmt.Errorf("%s needs %d GPUs a Task; CUDA_VISIBLE_DEVICES=%s names %d", id, perTask, visible, len(ids))
	}
	n := len(ids) / perTask
	if lanes > 0 {
		n = min(n, lanes)
	}
	groups := make([]string, n)
	for i := range groups {
		groups[i] = strings.Join(ids[i*perTask:(i+1)*perTask], ",")
	}
	return groups, nil
}

// withEngine returns cp running engine instead of the row's. A row without an engine choice
// accepts only "".
func withEngine(cp spec.Checkpoint, engine string) (spec.Checkpoint, error) {
	if engine == "" || engine == cp.Engine {
		return cp, nil
	}
	if err := spec.CheckEngine(engine); err != nil {
		return cp, err
	}
	if cp.Engine == "" {
		return cp, fmt.Errorf("%s has no engine choice; -engine %s cannot apply", cp.ID, engine)
	}
	cp.Engine = engine
	return cp, nil
}

// withLayout returns cp running the layout spec.ChooseLayout picks for layout (explicit, or
// "" for the row's first that fits) on the visible GPUs. It is the one choice both the server
// and `mediaserve task` make, so a native run and a served one use the same layout.
func withLayout(cp spec.Checkpoint, layout spec.Layout, visible string) (spec.Checkpoint, error) {
	l, err := cp.ChooseLayout(layout, visible)
	if err != nil {
		return cp, err
	}
	cp.Layout = l
	return cp, nil
}

// workerArgv is the row's worker command with its script path resolved and, for a row with
// an engine or layout choice, the engine and the layout it runs (docs/WORKER.md).
func workerArgv(cp spec.Checkpoint) []string {
	argv := resolveArgv(cp.Worker)
	if cp.Engine != "" {
		argv = append(argv, "--engine", cp.Engine)
	}
	if len(cp.Layouts) > 0 {
		argv = append(argv, "--layout", string(cp.Layout))
	}
	return argv
}

// resolveArgv makes a worker's script path absolute: families name it relative to the module
// root (MEDIAQUAL_ROOT, default the working directory), and the server may run anywhere.
func resolveArgv(argv []string) []string {
	root := os.Getenv("MEDIAQUAL_ROOT")
	if root == "" {
		root, _ = os.Getwd()
	}
	out := append([]string(nil), argv...)
	for i := 1; i < len(out); i++ {
		if p := filepath.Join(root, out[i]); !filepath.IsAbs(out[i]) && strings.HasSuffix(out[i], ".py") {
			if _, err := os.Stat(p); err == nil {
				out[i] = p
			}
		}
	}
	return out
}

// slogWriter turns worker stderr lines into log records.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// selectModels resolves -model flags. Without any it serves every row that can load here: the
// in-process families always, a worker family only when its bundle is present (otherwise a log
// line says which bundle is missing), so the default works on a machine without weights.
func selectModels(ids []string, log *slog.Logger) ([]spec.Checkpoint, error) {
	if len(ids) == 0 {
		var cps []spec.Checkpoint
		for _, cp := range models.Servable() {
			e, _ := models.Lookup(cp.ID)
			if why := bundle.Missing(e); cp.NewTask == nil && why != "" {
				log.Info("not serving by default: its bundle is missing (name it with -model to fail instead)", "model", cp.ID, "bundle", why)
				continue
			}
			cps = append(cps, cp)
		}
		return cps, nil
	}
	var cps []spec.Checkpoint
	for _, id := range ids {
		e, err := models.Lookup(id)
		if err != nil {
			return nil, err
		}
		if e.NewTask == nil && len(e.Worker) == 0 {
			return nil, fmt.Errorf("%s cannot be served: %s (%s)", id, e.Status, e.Note)
		}
		cps = append(cps, e.Checkpoint)
	}
	return cps, nil
}

// loadTimeout is how long a checkpoint's load may take: the -load-timeout flag when set, else
// the row's (bundle.LoadTimeout: MEDIAQUAL_LOAD_TIMEOUT, the row, the bundle's size).
func loadTimeout(id string, flag time.Duration) (time.Duration, string, error) {
	if flag > 0 {
		return flag, "-load-timeout", nil
	}
	e, err := models.Lookup(id)
	if err != nil {
		return 0, "", err
	}
	return bundle.LoadTimeout(e)
}

// loadAll loads every model before serving.
func loadAll(ctx context.Context, ms []server.Model, flag time.Duration) error {
	for _, m := range ms {
		for _, t := range m.Tasks() {
			if l, ok := t.(spec.Loader); ok {
				if err := l.Load(ctx); err != nil {
					return explainLoad(fmt.Errorf("loading %s: %w", m.Checkpoint.ID, err), []server.Model{m}, flag)
				}
			}
		}
	}
	return nil
}

// explainLoad adds to a load that ran out of time which timeout applied and how to raise it.
func explainLoad(err error, ms []server.Model, flag time.Duration) error {
	var se *spec.Error
	if !errors.As(err, &se) || se.Code != worker.CodeLoadTimeout {
		return err
	}
	var hints []string
	for _, m := range ms {
		if len(m.Checkpoint.Worker) > 0 {
			d, from, _ := loadTimeout(m.Checkpoint.ID, flag)
			hints = append(hints, m.Checkpoint.ID+": "+bundle.RaiseHint(d, from))
		}
	}
	return fmt.Errorf("%w; %s (or the -load-timeout flag)", err, strings.Join(hints, "; "))
}

// buildModels makes every checkpoint's Task with its load timeout.
func buildModels(cps []spec.Checkpoint, engine string, layout spec.Layout, log *slog.Logger, flag time.Duration, lanes int) ([]server.Model, error) {
	var ms []server.Model
	for _, cp := range cps {
		d, _, err := loadTimeout(cp.ID, flag)
		if err != nil {
			return nil, err
		}
		m, err := buildModel(cp, engine, layout, log, d, lanes)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	return ms, nil
}

func closeAll(ms []server.Model) {
	for _, m := range ms {
		for _, t := range m.Tasks() {
			if c, ok := t.(spec.Closer); ok {
				_ = c.Close()
			}
		}
	}
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
