package server

import (
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
// caller's MaxBytesReader; uploads stay in memory so no temporary file can outlive a request.
func readForm(r *http.Request, allowJSON bool) (*form, *apiError) {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	supported := "multipart/form-data"
	if allowJSON {
		supported = "application/json or multipart/form-data"
	}
	switch {
	case ct == "":
		return nil, errf(http.StatusUnsupportedMediaType, "unsupported_media_type", "", "missing Content-Type; send %s", supported)
	case err != nil:
		return nil, errf(http.StatusUnsupportedMediaType, "unsupported_media_type", "", "malformed Content-Type %q: %v", ct, err)
	case mt == "application/json" && allowJSON:
		return readJSON(r.Body)
	case mt == "multipart/form-data":
		if params["boundary"] == "" {
			return nil, invalid("", "multipart/form-data without a boundary")
		}
		return readMultipart(multipart.NewReader(r.Body, params["boundary"]))
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

func readJSON(body io.Reader) (*form, *apiError) {
	dec := json.NewDecoder(body)
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		if ae := bodyError(err); ae.Code == "request_too_large" {
			return nil, ae
		}
		return nil, invalid("", "body is not a JSON object: %v", err)
	}
	if dec.More() {
		return nil, invalid("", "body has data after the JSON object")
	}
	f := &form{values: map[string]string{}}
	for k, v := range raw {
		switch v := v.(type) {
		case nil: // an explicit null is the same as leaving the field out
		case string:
			f.values[k] = v
		case json.Number:
			f.values[k] = v.String()
		case bool:
			f.values[k] = fmt.Sprint(v)
		default:
			return nil, invalid(k, "%s must be a string or a number, not %T", k, v)
		}
	}
	return f, nil
}

func readMultipart(mr *multipart.Reader) (*form, *apiError) {
	f := &form{values: map[string]string{}, files: map[string][][]byte{}}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return f, nil
		}
		if err != nil {
			if ae := bodyError(err); ae.Code == "request_too_large" {
				return nil, ae
			}
			return nil, invalid("", "malformed multipart body: %v", err)
		}
		name := p.FormName()
		if name == "" {
			return nil, invalid("", "multipart part without a form field name")
		}
		data, err := io.ReadAll(p)
		if err != nil {
			if ae := bodyError(err); ae.Code == "request_too_large" {
				return nil, ae
			}
			return nil, invalid(name, "reading multipart field %q: %v", name, err)
		}
		if p.FileName() != "" || strings.HasPrefix(p.Header.Get("Content-Type"), "image/") {
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
