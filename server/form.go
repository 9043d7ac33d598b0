package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
)

// form is a request's fields as strings (the shape AIPerf's multipart sends, and what JSON
// values are normalised to) plus its uploaded files.
type form struct {
	values map[string]string
	files  map[string][][]byte
}

const maxFieldBytes = 64 << 10

// readForm reads a JSON or multipart body (as allowed) into a form. Bodies are bounded by the
// caller's MaxBytesReader, of maxBody bytes; uploads stay in memory so no temporary file can
// outlive a request.
func readForm(r *http.Request, allowJSON bool, maxBody int64) (*form, *apiError) {
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
		return readMultipart(multipart.NewReader(r.Body, params["boundary"]), params["boundary"], min(r.ContentLength, maxBody))
	}
	return nil, errf(http.StatusUnsupportedMediaType, "unsupported_media_type", "", "Content-Type %q is not supported; send %s", mt, supported)
}

func bodyError(err error) *apiError {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errf(http.StatusRequestEntityTooLarge, "request_too_large", "", "request body exceeds %d bytes", mbe.Limit)
	}
	return invalid("", "reading request body: %v", err)
}

// readJSON reads one JSON object token by token so that a key given twice is rejected (as in
// multipart) rather than silently resolved to its last value.
func readJSON(body io.Reader) (*form, *apiError) {
	dec := json.NewDecoder(body)
	dec.UseNumber()
	notObject := func(err error) *apiError {
		if ae := bodyError(err); ae.Code == "request_too_large" {
			return ae
		}
		return invalid("", "body is not a JSON object: %v", err)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, notObject(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, invalid("", "body is not a JSON object: it starts with %v", tok)
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
			return nil, invalid("", "body is not a JSON object: unexpected %v", tok)
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, notObject(err)
		}
		if seen[k] {
			return nil, invalid(k, "field %q is given more than once", k)
		}
		seen[k] = true
		switch v := v.(type) {
		case nil: // an explicit null is the same as leaving the field out
		case string:
			f.values[k] = v
		case json.Number:
			f.values[k] = v.String()
		case bool:
			f.values[k] = fmt.Sprint(v)
		default:
			return nil, invalid(k, "%s must be a string or a number, not %s", k, jsonKind(v))
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, notObject(err)
	}
	switch _, err := dec.Token(); {
	case err == io.EOF:
		return f, nil
	case err != nil && bodyError(err).Code == "request_too_large":
		return nil, bodyError(err)
	}
	return nil, invalid("", "body has data after the JSON object")
}

func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}

// readMultipart reads the parts of mr. size is the body's declared length (-1: unknown): a file
// part is read into a buffer of that capacity, not grown to it (a 1024² upload took a dozen
// doublings and copies on an edit's critical path); MaxBytesReader still bounds what is read.
func readMultipart(mr *multipart.Reader, boundary string, size int64) (*form, *apiError) {
	f := &form{values: map[string]string{}, files: map[string][][]byte{}}
	for parts := 0; ; parts++ {
		p, err := mr.NextPart()
		if err == io.EOF {
			return f, nil
		}
		if err != nil {
			if ae := bodyError(err); ae.Code == "request_too_large" {
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
		var data []byte
		if isFile && size > 0 {
			b := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead)) // ReadFrom grows below MinRead free
			_, err = b.ReadFrom(p)
			data, size = b.Bytes(), -1 // one such buffer a request
		} else {
			data, err = io.ReadAll(p)
		}
		if err != nil {
			if ae := bodyError(err); ae.Code == "request_too_large" {
				return nil, ae
			}
			return nil, invalid(name, "reading multipart field %q: %v", name, err)
		}
		if isFile {
			f.files[name] = append(f.files[name], data)
			continue
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
