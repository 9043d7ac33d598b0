package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/mediaqual/mediaqual/harness/api"
)

// APIErrorBody is the body of the error envelope {"error": {...}}.
type APIErrorBody = api.ErrorBody

// APIError is a non-2xx answer.
type APIError struct {
	Method, Route string // e.g. "POST", "/v1/videos"
	Status        int
	Body          APIErrorBody // from the envelope; for a body that is not one, Message quotes it
	RequestID     string       // the response's X-Request-ID
	RetryAfter    string       // the response's Retry-After, if any
	RawBody       []byte       // at most 4 KiB of the body as received
}

// Error reads "POST /v1/videos: HTTP 400 unsupported_value (param fps): message [X-Request-ID r1]".
func (e *APIError) Error() string {
	var b strings.Builder
	if e.Route != "" {
		fmt.Fprintf(&b, "%s %s: ", e.Method, e.Route)
	}
	fmt.Fprintf(&b, "HTTP %d", e.Status)
	if e.Body.Code != "" {
		b.WriteString(" " + e.Body.Code)
	}
	if e.Body.Param != "" {
		fmt.Fprintf(&b, " (param %s)", e.Body.Param)
	}
	b.WriteString(": " + e.Body.Message)
	if e.RequestID != "" {
		fmt.Fprintf(&b, " [X-Request-ID %s]", e.RequestID)
	}
	return b.String()
}

func apiError(method, route string, resp *http.Response, body []byte) *APIError {
	e := &APIError{
		Method: method, Route: route, Status: resp.StatusCode,
		RequestID: resp.Header.Get("X-Request-ID"), RetryAfter: resp.Header.Get("Retry-After"),
		RawBody: body[:min(len(body), 4096)],
	}
	// code is a string in the contract and an integer in vLLM's ErrorInfo (the HTTP status);
	// param may be null.
	var env struct {
		Error *struct {
			Message, Type string
			Param         *string
			Code          any
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err == nil && env.Error != nil && (env.Error.Code != nil || env.Error.Message != "") {
		e.Body.Message, e.Body.Type = env.Error.Message, env.Error.Type
		if env.Error.Param != nil {
			e.Body.Param = *env.Error.Param
		}
		switch code := env.Error.Code.(type) {
		case string:
			e.Body.Code = code
		case float64:
			e.Body.Code = strconv.FormatFloat(code, 'f', -1, 64)
		}
	} else {
		e.Body.Message = fmt.Sprintf("no error envelope (Content-Type %q): body %s", resp.Header.Get("Content-Type"), snippet(body))
	}
	if resp.StatusCode == http.StatusUnauthorized {
		e.Body.Message += " (the server wants credentials: set MEDIAQUAL_API_KEY to its API key)"
	}
	return e
}

func reqIDSuffix(resp *http.Response) string {
	if id := resp.Header.Get("X-Request-ID"); id != "" {
		return " [X-Request-ID " + id + "]"
	}
	return " [no X-Request-ID]"
}

// snippet quotes at most 200 bytes of b.
func snippet(b []byte) string {
	const n = 200
	if len(b) > n {
		return fmt.Sprintf("%q… (%d bytes)", b[:n], len(b))
	}
	return fmt.Sprintf("%q", b)
}

var _ error = (*APIError)(nil)
