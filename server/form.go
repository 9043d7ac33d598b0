package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"strings"
)

// form is a request's fields as strings (the shape AIPerf's multipart sends, and what JSON
// values are normalised to) plus its uploaded files.
type form struct {
	values map[string]string
	files  map[string][][]byte
}

// Bounds on a body's shape, checked as it is read, so no request makes the server hold more
// than its own limits whatever it declares: a text value's bytes, the fields and file parts of
// a form, and a field name's length.
const (
	maxFieldBytes = 64 << 10
	maxFields     = 32
	maxFileParts  = 2
	maxNameBytes  = 64
)

// readForm reads a JSON or multipart body (as allowed) into a form. Bodies are bounded by the
// caller's MaxBytesReader; uploads stay in memory, charged to mem, so no temporary file can
// outlive a request.
func readForm(r *http.Request, allowJSON bool, mem *reservation) (*form, *apiError) {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	supported := "multipart/form-data"
	if allowJSON {
		supported = "application/json or multipart/form-data"
	}
	accepted := mt == "multipart/form-data" || (allowJSON && mt == "application/json")
	switch {
	case ct == "":
		return nil, errf(http.StatusUnsupportedMediaType, "unsupported_media_type", "", "missing Content-Type; send %s", supported)
	case err != nil && accepted && errors.Is(err, mime.ErrInvalidMediaParameter):
		// An accepted type with broken parameters is a malformed request, not an unsupported
		// media type (415 is for bodies that are neither JSON nor multipart).
		return nil, invalid("", "malformed Content-Type %q: %v", ct, err)
	case err != nil:
		return nil, errf(http.StatusUnsupportedMediaType, "unsupported_media_type", "", "malformed Content-Type %q: %v", ct, err)
	case mt == "application/json" && allowJSON:
		return readJSON(r.Body)
	case mt == "multipart/form-data":
		if params["boundary"] == "" {
			return nil, invalid("", "multipart/form-data without a boundary")
		}
		return readMultipart(multipart.NewReader(r.Body, params["boundary"]), params["boundary"], mem)
	}
	return nil, errf(http.StatusUnsupportedMediaType, "unsupported_media_type", "", "Content-Type %q is not supported; send %s", mt, supported)
}

// bodyError names why reading the body failed: over its limit (413), over the memory budget
// (429), or otherwise malformed (400).
func bodyError(err error) *apiError {
	if ae := overBudget(err); ae != nil {
		return ae
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errf(http.StatusRequestTimeout, "request_timeout", "", "the request body arrived slower than the server accepts: %v", err)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errf(http.StatusRequestEntityTooLarge, "request_too_large", "", "request body exceeds %d bytes", mbe.Limit)
	}
	return invalid("", "reading request body: %v", err)
}

// readJSON reads one JSON object token by token: a key given twice is rejected (as in
// multipart) rather than silently resolved to its last value, and a value that is an object or
// an array is refused at its first byte, before any of it is read.
func readJSON(body io.Reader) (*form, *apiError) {
	dec := json.NewDecoder(body)
	dec.UseNumber()
	notObject := func(err error) *apiError {
		if ae := bodyError(err); ae.Status != http.StatusBadRequest {
			return ae
		}
		return invalid("", "body is not a JSON object: %v", err)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, notObject(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, invalid("", "body is not a JSON object: it starts with %s", excerpt(fmt.Sprint(tok)))
	}
	f := &form{values: map[string]string{}}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, notObject(err)
		}
		k, ok := tok.(string)
		if !ok {
			return nil, invalid("", "body is not a JSON object: unexpected %s", excerpt(fmt.Sprint(tok)))
		}
		if e := checkName(k, len(seen)); e != nil {
			return nil, e
		}
		v, err := dec.Token()
		if err != nil {
			return nil, notObject(err)
		}
		if seen[k] {
			return nil, invalid(k, "field %q is given more than once", k)
		}
		seen[k] = true
		switch v := v.(type) {
		case nil: // an explicit null is the same as leaving the field out
		case string:
			if len(v) > maxFieldBytes {
				return nil, invalid(k, "field %q is longer than %d bytes", k, maxFieldBytes)
			}
			f.values[k] = v
		case json.Number:
			if len(v) > maxFieldBytes {
				return nil, invalid(k, "field %q is longer than %d bytes", k, maxFieldBytes)
			}
			f.values[k] = v.String()
		case bool:
			f.values[k] = fmt.Sprint(v)
		case json.Delim: // '{' or '['; nothing of it is read
			kind := "an object"
			if v == '[' {
				kind = "an array"
			}
			return nil, invalid(k, "%s must be a string or a number, not %s", k, kind)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, notObject(err)
	}
	switch _, err := dec.Token(); {
	case err == io.EOF:
		return f, nil
	case err != nil && bodyError(err).Status != http.StatusBadRequest:
		return nil, bodyError(err)
	}
	return nil, invalid("", "body has data after the JSON object")
}

// checkName refuses a field name longer than maxNameBytes, and a field beyond the first
// maxFields (have: the fields so far), naming it by an excerpt.
func checkName(name string, have int) *apiError {
	if len(name) > maxNameBytes {
		return unsupportedParam(excerpt(name), "field name %q is longer than %d bytes", excerpt(name), maxNameBytes)
	}
	if have >= maxFields {
		return invalid(name, "the body has more than %d fields", maxFields)
	}
	return nil
}

// readMultipart reads the parts of mr: at most maxFields text fields of at most maxFieldBytes
// each, and at most maxFileParts files, whose buffers grow as their bytes arrive (never sized
// from a declared length) and are charged to mem as they grow; the caller's MaxBytesReader
// bounds the whole body.
func readMultipart(mr *multipart.Reader, boundary string, mem *reservation) (*form, *apiError) {
	f := &form{values: map[string]string{}, files: map[string][][]byte{}}
	nfiles := 0
	for parts := 0; ; parts++ {
		p, err := mr.NextPart()
		if err == io.EOF {
			return f, nil
		}
		if err != nil {
			if ae := bodyError(err); ae.Status != http.StatusBadRequest {
				return nil, ae
			}
			if parts == 0 {
				return nil, invalid("", "malformed multipart body: no part delimited by the boundary %q of the Content-Type (%v)", boundary, err)
			}
			return nil, invalid("", "malformed multipart body after %d part(s): %v", parts, err)
		}
		name := p.FormName()
		if name == "" {
			return nil, invalid("", "multipart part without a form field name")
		}
		isFile := p.FileName() != "" || strings.HasPrefix(p.Header.Get("Content-Type"), "image/")
		if e := checkName(name, parts-nfiles); e != nil && (!isFile || len(name) > maxNameBytes) {
			return nil, e
		}
		if isFile {
			if nfiles++; nfiles > maxFileParts {
				return nil, unsupportedValue(name, "at most %d file parts are accepted (one reference image)", maxFileParts)
			}
			data, e := readFile(p, name, mem)
			if e != nil {
				return nil, e
			}
			f.files[name] = append(f.files[name], data)
			continue
		}
		data, err := io.ReadAll(io.LimitReader(p, maxFieldBytes+1))
		if err != nil {
			if ae := bodyError(err); ae.Status != http.StatusBadRequest {
				return nil, ae
			}
			return nil, invalid(name, "reading multipart field %q: %v", name, err)
		}
		if len(data) > maxFieldBytes {
			return nil, invalid(name, "field %q is longer than %d bytes", name, maxFieldBytes)
		}
		if _, dup := f.values[name]; dup {
			return nil, invalid(name, "field %q is given more than once", name)
		}
		f.values[name] = string(data)
	}
}

// readFile reads a file part into a buffer that doubles as it fills, each growth charged to
// mem first: an upload the memory budget cannot hold is refused (429) as it arrives.
func readFile(r io.Reader, name string, mem *reservation) ([]byte, *apiError) {
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			grown := max(64<<10, 2*cap(buf))
			if e := mem.take(int64(grown - cap(buf))); e != nil {
				return nil, e
			}
			buf = append(make([]byte, 0, grown), buf...)
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			if ae := bodyError(err); ae.Status != http.StatusBadRequest {
				return nil, ae
			}
			return nil, invalid(name, "reading multipart field %q: %v", name, err)
		}
	}
}
