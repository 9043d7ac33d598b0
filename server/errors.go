package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"
)

// apiError is the OpenAI error envelope's body plus the HTTP status that carries it.
type apiError struct {
	Status  int    `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param,omitempty"`
	Code    string `json:"code"`

	retryAfter time.Duration // the answer's Retry-After, when set
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errf(status int, code, param, format string, args ...any) *apiError {
	typ := "invalid_request_error"
	switch {
	case status >= 500:
		typ = "server_error"
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status == http.StatusNotFound:
		typ = "not_found_error"
	}
	return &apiError{Status: status, Type: typ, Param: excerpt(param), Code: code, Message: bounded(fmt.Sprintf(format, args...))}
}

// maxMessageBytes bounds an error's message, which may quote what the client sent: the
// answer and its ledger line stay small whatever the input.
const maxMessageBytes = 1 << 10

func bounded(msg string) string { return cut(msg, maxMessageBytes) }

// cut is s cut to at most n bytes (on a rune boundary), saying how long it was.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	at := n
	for at > 0 && !utf8.RuneStart(s[at]) {
		at--
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:at], len(s))
}

func invalid(param, format string, args ...any) *apiError {
	return errf(http.StatusBadRequest, "invalid_request", param, format, args...)
}

func unsupportedParam(param, format string, args ...any) *apiError {
	return errf(http.StatusBadRequest, "unsupported_parameter", param, format, args...)
}

func unsupportedValue(param, format string, args ...any) *apiError {
	return errf(http.StatusBadRequest, "unsupported_value", param, format, args...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(e.retryAfter)))
	}
	writeJSON(w, e.Status, map[string]*apiError{"error": e})
}
