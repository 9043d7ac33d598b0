// Package server is mediaserve: an OpenAI-compatible media-generation server that runs
// native Tasks for text_to_video (async jobs) and image_edit (synchronous), dispatching on the
// capabilities each model declares. docs/API.md is its contract.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
)

// Model is one served checkpoint and the Task that runs it.
type Model struct {
	Checkpoint spec.Checkpoint
	Task       spec.Task
	// Replicas are further Tasks of the same checkpoint, each on devices of its own: the model
	// is then served by 1+len(Replicas) lanes taking jobs from one queue, so requests above
	// one at a time run in parallel.
	Replicas []spec.Task
	// Devices names each lane's devices (e.g. CUDA ids), Task's first; shown in /v1/models.
	Devices []string
	Runtime string // "in-process" or "worker", reported in /v1/models
}

// Tasks are the model's lanes' Tasks, Task first.
func (m Model) Tasks() []spec.Task { return append([]spec.Task{m.Task}, m.Replicas...) }

// Config configures a Server. Zero values take the documented defaults.
type Config struct {
	Models        []Model
	ArtifactDir   string        // required; artifacts live here until deleted or expired
	Lifetime      time.Duration // artifact lifetime after completion (default 1h)
	QueueCapacity int           // queued jobs per model lane beyond the running one (default 16)
	Ledger        io.Writer     // request ledger, JSON lines (nil: none)
	APIKey        string        // when set, /v1/* needs "Authorization: Bearer <key>"
	MaxBodyBytes  int64         // request body limit (default 32 MiB)
	MaxPixels     int           // largest reference image accepted, in pixels (default 4096*4096)
	KeepArtifacts bool          // leave artifacts on disk at Close
	JanitorEvery  time.Duration // how often expired artifacts are removed (default lifetime/10, at most 1m)
	// PollHold holds a poll of an unfinished video (GET /v1/videos/{id}) until the job's
	// status or progress changes, at most this long (0: answer at once, as OpenAI does).
	PollHold time.Duration
	Log      *slog.Logger
	// Fault switches on one deliberately broken behaviour (see Faults); empty for a healthy
	// server. Only the suite's self-test uses it.
	Fault string
}

// Server is a running mediaserve instance.
type Server struct {
	cfg    Config
	log    *slog.Logger
	ledger *ledger
	lanes  map[string]*lane
	order  []string // model ids in configured order
	ready  atomic.Bool
	fault  *fault

	mu     sync.Mutex
	closed bool
	jobs   map[string]*job
	gone   map[string]string // id -> why it is gone (deleted, expired), for clear 404s

	stop    chan struct{}
	wg      sync.WaitGroup
	closing sync.Once
}

// New validates cfg and prepares the lanes; call Load before serving traffic.
func New(cfg Config) (*Server, error) {
	if cfg.ArtifactDir == "" {
		return nil, errors.New("server: ArtifactDir is required")
	}
	if len(cfg.Models) == 0 {
		return nil, errors.New("server: no models to serve")
	}
	if cfg.Lifetime <= 0 {
		cfg.Lifetime = time.Hour
	}
	if cfg.QueueCapacity <= 0 {
		cfg.QueueCapacity = 16
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	if cfg.MaxPixels <= 0 {
		cfg.MaxPixels = DefaultMaxPixels
	}
	if cfg.JanitorEvery <= 0 {
		cfg.JanitorEvery = min(cfg.Lifetime/10, time.Minute)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	f, err := newFault(cfg.Fault)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if err := os.MkdirAll(cfg.ArtifactDir, 0o755); err != nil {
		return nil, fmt.Errorf("server: artifact dir: %w", err)
	}
	s := &Server{
		cfg: cfg, log: cfg.Log, ledger: newLedger(cfg.Ledger, cfg.Log),
		lanes: map[string]*lane{}, jobs: map[string]*job{}, gone: map[string]string{},
		stop: make(chan struct{}), fault: f,
	}
	for _, m := range cfg.Models {
		id := m.Checkpoint.ID
		if _, dup := s.lanes[id]; dup {
			return nil, fmt.Errorf("server: model %q configured twice", id)
		}
		if m.Task == nil || slices.Contains(m.Replicas, nil) || len(m.Checkpoint.Capabilities) == 0 {
			return nil, fmt.Errorf("server: model %q needs a Task and at least one capability", id)
		}
		l := &lane{model: m, queue: make(chan *job, cfg.QueueCapacity), tasks: m.Tasks()}
		for range l.tasks {
			l.encodes = append(l.encodes, make(chan encodeJob, 1))
		}
		s.lanes[id] = l
		s.order = append(s.order, id)
	}
	if !cfg.KeepArtifacts {
		s.sweepOrphans()
	}
	return s, nil
}

// Load loads every model (weights, worker processes) and starts the lanes; /ready answers
// 200 only after it returns nil.
func (s *Server) Load(ctx context.Context) error {
	if err := s.fault.load(); err != nil {
		return err
	}
	for _, id := range s.order {
		for i, t := range s.lanes[id].tasks {
			if ld, ok := t.(spec.Loader); ok {
				start := time.Now()
				if err := ld.Load(ctx); err != nil {
					return fmt.Errorf("loading %s (lane %d): %w", id, i, err)
				}
				s.log.Info("model loaded", "model", id, "lane", i, "took", time.Since(start))
			}
		}
	}
	for _, id := range s.order {
		for i := range s.lanes[id].tasks {
			s.wg.Add(2)
			go s.runLane(s.lanes[id], i)
			go s.runEncoder(s.lanes[id], i)
		}
	}
	s.wg.Add(1)
	go s.janitor()
	s.ready.Store(true)
	return nil
}

// Close stops accepting work, ends every queued and running job (each gets its terminal ledger
// line), closes the Tasks and removes every artifact unless KeepArtifacts is set.
func (s *Server) Close() error {
	var errs []error
	s.closing.Do(func() {
		s.ready.Store(false)
		s.mu.Lock()
		s.closed = true
		for _, j := range s.jobs {
			j.cancel(errShutdown)
		}
		for _, l := range s.lanes {
			close(l.queue)
		}
		s.mu.Unlock()
		close(s.stop)
		s.wg.Wait()
		for _, id := range s.order {
			for _, t := range s.lanes[id].tasks {
				if c, ok := t.(spec.Closer); ok {
					if err := c.Close(); err != nil {
						errs = append(errs, fmt.Errorf("closing %s: %w", id, err))
					}
				}
			}
		}
		if !s.cfg.KeepArtifacts {
			s.mu.Lock()
			for _, j := range s.jobs {
				s.removeFiles(j)
			}
			s.mu.Unlock()
			s.sweepOrphans()
		}
		if err := s.fault.exitStatus(); err != nil {
			errs = append(errs, err)
		}
	})
	return errors.Join(errs...)
}

var errShutdown = errors.New("server shutting down")

// artifactName matches every file this server writes, so a restart can find orphans of a
// previous run that died without cleaning up.
var artifactName = regexp.MustCompile(`^\.?(video|img)_[0-9a-f]{32}\.(mp4|png)(\.tmp)?$`)

func (s *Server) sweepOrphans() {
	entries, err := os.ReadDir(s.cfg.ArtifactDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if artifactName.MatchString(e.Name()) {
			if err := os.Remove(filepath.Join(s.cfg.ArtifactDir, e.Name())); err == nil {
				s.log.Info("removed orphaned artifact", "file", e.Name())
			}
		}
	}
}

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			writeError(w, errf(http.StatusServiceUnavailable, "not_ready", "", "models are loading"))
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.HandleFunc("GET /v1/models", s.listModels)
	mux.HandleFunc("GET /v1/models/{id...}", s.getModel)
	mux.HandleFunc("POST /v1/videos", s.createVideo)
	mux.HandleFunc("GET /v1/videos", s.listVideos)
	mux.HandleFunc("GET /v1/videos/{id}", s.getVideo)
	mux.HandleFunc("GET /v1/videos/{id}/content", s.videoContent)
	mux.HandleFunc("DELETE /v1/videos/{id}", s.deleteVideo)
	mux.HandleFunc("POST /v1/images/edits", s.createEdit)
	mux.HandleFunc("GET /v1/images/{id}/content", s.imageContent)
	mux.HandleFunc("DELETE /v1/images/{id}", s.deleteImage)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errf(http.StatusNotFound, "not_found", "", "no route %s %s", r.Method, r.URL.Path))
	})
	return s.withRequestID(s.withAuth(mux))
}

type ctxKey int

const requestIDKey ctxKey = 0

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:@/+=-]{1,128}$`)

// withRequestID echoes X-Request-ID, generating one when absent or unusable, so every
// response and ledger line can be joined to a client record.
func (s *Server) withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-ID")
		if !requestIDPattern.MatchString(id) {
			id = "req_" + randomHex()
		}
		w.Header().Set("X-Request-ID", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

func (s *Server) withAuth(next http.Handler) http.Handler {
	if s.cfg.APIKey == "" {
		return next
	}
	want := "Bearer " + s.cfg.APIKey
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") && r.Header.Get("Authorization") != want {
			writeError(w, errf(http.StatusUnauthorized, "unauthorized", "", "missing or wrong bearer key in Authorization"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func requestID(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey).(string)
	return id
}

// reject answers with an error envelope and records the refusal in the ledger.
func (s *Server) reject(w http.ResponseWriter, r *http.Request, route, model string, e *apiError) {
	writeError(w, e)
	s.ledger.write(LedgerEntry{
		Event: "rejected", RequestID: requestID(r), CorrelationID: r.Header.Get("X-Correlation-ID"),
		Route: route, Model: model, Status: "rejected", HTTPStatus: e.Status,
		Error: &JobError{Code: e.Code, Message: e.Message},
	})
}

// baseURL is where this request reached the server; artifact URLs must be absolute because
// AIPerf downloads from the job's url as given.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}
