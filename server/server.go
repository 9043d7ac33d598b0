// Package server is mediaserve: an OpenAI-compatible media-generation server that runs
// native Tasks for text_to_video (async jobs) and image_edit (synchronous), dispatching on the
// capabilities each model declares. docs/API.md is its contract.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
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
	// PublicURL is the scheme://host[:port] clients reach this server at: artifact URLs are
	// built from it, never from a request's Host header, which any client sets. "": the
	// address the request's connection reached (its local address).
	PublicURL     string
	MaxBodyBytes  int64 // request body limit (default 32 MiB); a video's is at most 1 MiB
	MaxPixels     int   // largest reference image accepted, in pixels (default 4096*4096)
	KeepArtifacts bool  // leave artifacts on disk at Close
	// MemoryBudget bounds the bytes requests make the server hold at once: bodies being
	// parsed, uploads of live jobs, decodes of references (budget.go; default 512 MiB).
	MemoryBudget int64
	// MaxJobs bounds the jobs kept (queued, running, and finished until they expire or are
	// deleted; default 1024); MaxArtifactBytes the artifact bytes on disk (default 8 GiB);
	// MaxLedgerBytes the ledger's size (default 256 MiB). Past a bound new jobs are refused by
	// name; accepted ones still finish and get their ledger lines.
	MaxJobs          int
	MaxArtifactBytes int64
	MaxLedgerBytes   int64
	// JobTimeout is how long a job's Task may run at the row's pinned settings (default 15
	// min); a job asking more steps, frames or pixels gets proportionally more. Past it the
	// job fails with job_timeout.
	JobTimeout time.Duration
	// MinUploadRate is the slowest a request body may arrive, in bytes a second after a first
	// 10 s (default 64 KiB/s); MaxConns bounds the client connections open for requests
	// (default 512), of which uploads may hold three quarters and one client address's uploads
	// a quarter (conn.go).
	MinUploadRate int64
	MaxConns      int
	IdleTimeout   time.Duration // how long a keep-alive connection may sit idle (default 30 s)
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
	cfg     Config
	log     *slog.Logger
	ledger  *ledger
	lanes   map[string]*lane
	order   []string // model ids in configured order
	ready   atomic.Bool
	fault   *fault
	mem     *budget
	denied  rateLimit // 401s ledgered
	crowded rateLimit // 429 too_many_uploads ledgered
	conns   *connGuard

	mu     sync.Mutex
	closed bool
	jobs   map[string]*job
	gone   map[string]string // id -> why it is gone (deleted, expired), for clear 404s
	// artifactBytes is the bytes of finished jobs' artifacts on disk (MaxArtifactBytes).
	artifactBytes int64

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
	if cfg.MemoryBudget <= 0 {
		cfg.MemoryBudget = DefaultMemoryBudget
	}
	if cfg.MaxJobs <= 0 {
		cfg.MaxJobs = 1024
	}
	if cfg.MaxArtifactBytes <= 0 {
		cfg.MaxArtifactBytes = 8 << 30
	}
	if cfg.MaxLedgerBytes <= 0 {
		cfg.MaxLedgerBytes = 256 << 20
	}
	if cfg.JobTimeout <= 0 {
		cfg.JobTimeout = 15 * time.Minute
	}
	if cfg.MinUploadRate <= 0 {
		cfg.MinUploadRate = 64 << 10
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 512
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 30 * time.Second
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	if u, err := url.Parse(cfg.PublicURL); cfg.PublicURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return nil, fmt.Errorf("server: PublicURL %q is not an http:// or https:// URL with a host", cfg.PublicURL)
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
		cfg: cfg, log: cfg.Log, ledger: newLedger(cfg.Ledger, cfg.MaxLedgerBytes, cfg.Log),
		mem: &budget{limit: cfg.MemoryBudget}, conns: newConnGuard(cfg.MaxConns),
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
	if s.ledger.full() { // an appended ledger counts its earlier runs' lines
		s.log.Warn("the ledger is already at its size limit: no job will be accepted until it is moved away or the limit raised",
			"limit", cfg.MaxLedgerBytes)
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
		if err := s.ledger.close(); err != nil {
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
	// A down ledger leaves /health at 200: the process serves, and a restart would lose the
	// lines that wait for the disk. /ready says no new job is taken.
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if e := s.ledgerDown(); e != nil {
			writeJSON(w, http.StatusOK, map[string]any{"status": "degraded", "reason": e})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		e := s.ledgerDown()
		if !s.ready.Load() {
			e = errf(http.StatusServiceUnavailable, "not_ready", "", "models are loading")
		}
		if e != nil {
			writeError(w, e)
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
	return s.withRequestID(s.withConnBounds(s.withAuth(mux)))
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

// withAuth holds /v1/* to the bearer key, compared in constant time (over digests, so not
// even its length leaks). Refusals are ledgered, at most limitedLinesPerSecond a second.
func (s *Server) withAuth(next http.Handler) http.Handler {
	if s.cfg.APIKey == "" {
		return next
	}
	want := sha256.Sum256([]byte("Bearer " + s.cfg.APIKey))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := sha256.Sum256([]byte(r.Header.Get("Authorization")))
		if strings.HasPrefix(r.URL.Path, "/v1/") && subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			e := errf(http.StatusUnauthorized, "unauthorized", "", "missing or wrong bearer key in Authorization")
			s.rejectAtMost(w, r, r.Method+" "+excerpt(r.URL.Path), "", e, &s.denied)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limitedLinesPerSecond bounds the ledger lines of refusals any client can have at will,
// before its request is read (401, 429 too_many_uploads): a client guessing keys or
// reconnecting as fast as it can cannot fill the ledger; each line says how many refusals
// went unwritten before it.
const limitedLinesPerSecond = 10

// rateLimit allows limitedLinesPerSecond events in each second and counts the rest.
type rateLimit struct {
	mu      sync.Mutex
	second  int64
	n       int
	dropped int
}

// allow says whether an event at now may be recorded, and how many were dropped before it.
func (l *rateLimit) allow(now time.Time) (dropped int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sec := now.Unix(); sec != l.second {
		l.second, l.n = sec, 0
	}
	if l.n >= limitedLinesPerSecond {
		l.dropped++
		return 0, false
	}
	l.n++
	dropped, l.dropped = l.dropped, 0
	return dropped, true
}

func requestID(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey).(string)
	return id
}

// correlationID is the request's X-Correlation-ID when it is usable (the same rule as
// X-Request-ID); the ledger records nothing else.
func correlationID(r *http.Request) string {
	if id := r.Header.Get("X-Correlation-ID"); requestIDPattern.MatchString(id) {
		return id
	}
	return ""
}

// reject answers with an error envelope and records the refusal in the ledger.
func (s *Server) reject(w http.ResponseWriter, r *http.Request, route, model string, e *apiError) {
	s.rejectAtMost(w, r, route, model, e, nil)
}

// rejectAtMost is reject whose ledger line is written only when limit allows (nil: always),
// saying how many limit left out before it.
func (s *Server) rejectAtMost(w http.ResponseWriter, r *http.Request, route, model string, e *apiError, limit *rateLimit) {
	if e.Status == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	writeError(w, e)
	dropped := 0
	if limit != nil {
		var ok bool
		if dropped, ok = limit.allow(time.Now()); !ok {
			return
		}
	}
	s.ledger.write(LedgerEntry{
		Event: "rejected", RequestID: requestID(r), CorrelationID: correlationID(r),
		Route: route, Model: excerpt(model), Status: "rejected", HTTPStatus: e.Status,
		Error: &JobError{Code: e.Code, Message: e.Message}, Suppressed: dropped,
	}, false)
}

// baseURL is where artifact URLs point: PublicURL, else the local address the request's
// connection was accepted on.
func (s *Server) baseURL(r *http.Request) string {
	if s.cfg.PublicURL != "" {
		return s.cfg.PublicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		return scheme + "://" + a.String()
	}
	return ""
}

// maxVideoBody bounds a video request's body: it carries no file, and its fields (two
// prompts of at most 32000 characters) fit well within it.
const maxVideoBody = 1 << 20

// readBody reads r's body, JSON or multipart (as allowed), of at most limit bytes arriving at
// MinUploadRate or faster. held is the budget the form's files hold (the caller releases it,
// or hands it to the job); the body's own bytes are charged only while they are parsed.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, allowJSON bool, limit int64) (*form, *reservation, *apiError) {
	held, parse := s.mem.reserve(), s.mem.reserve()
	defer parse.release()
	paced := s.paceBody(w, r, limit)
	r.Body = http.MaxBytesReader(w, &chargedBody{ReadCloser: paced, res: parse}, limit)
	f, e := readForm(r, allowJSON, held)
	paced.done(s, 0)
	if e != nil {
		held.release()
	}
	return f, held, e
}

// chargeDecode adds an in-process edit's decode cost to its reservation: 413 when it could
// never fit the budget, 429 when it does not fit now.
func (s *Server) chargeDecode(held *reservation, cost int64) *apiError {
	if cost > s.cfg.MemoryBudget {
		return errf(http.StatusRequestEntityTooLarge, "image_too_large", "image",
			"decoding the reference would take %d bytes, more than the server's memory budget of %d", cost, s.cfg.MemoryBudget)
	}
	return held.take(cost)
}

// full refuses new jobs by name when the store is at a bound (jobs kept, artifact bytes or
// ledger bytes) or the ledger cannot write. Call with s.mu held.
func (s *Server) full() *apiError {
	if e := s.ledgerDown(); e != nil {
		return e
	}
	switch {
	case len(s.jobs) >= s.cfg.MaxJobs:
		return errf(http.StatusTooManyRequests, "too_many_jobs", "",
			"the server keeps %d jobs, its limit; retry once some expire (-lifetime %s) or are deleted", len(s.jobs), s.cfg.Lifetime)
	case s.artifactBytes >= s.cfg.MaxArtifactBytes:
		return errf(http.StatusInsufficientStorage, "artifact_storage_full", "",
			"artifacts take %d bytes, the server's limit of %d; retry once some expire or are deleted", s.artifactBytes, s.cfg.MaxArtifactBytes)
	case s.ledger.full():
		return errf(http.StatusInsufficientStorage, "ledger_full", "",
			"the request ledger has reached its limit of %d bytes; no new job is accepted", s.cfg.MaxLedgerBytes)
	}
	return nil
}

// ledgerDown is the refusal of new jobs while the ledger cannot write (nil while it can).
func (s *Server) ledgerDown() *apiError {
	why := s.ledger.downBecause()
	if why == "" {
		return nil
	}
	e := errf(http.StatusServiceUnavailable, "ledger_unwritable", "",
		"the request ledger cannot be written (%s): no new job is accepted until it can; the lines owed to accepted jobs wait in memory", why)
	e.retryAfter = ledgerRetry
	return e
}
