package osbapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// DecodeJSON reads r's body, at most maxBytes of it, as one JSON value
// into v. Unknown fields are ignored (the SDKs send fields Hutch does not
// model); a wrong type, malformed JSON, trailing data or an empty body
// (unless optional) is a 400 saying which, a larger body a 413.
func DecodeJSON(r *http.Request, v any, maxBytes int64, optional bool) error {
	if r.ContentLength > maxBytes {
		return Errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("request body larger than %d bytes", maxBytes))
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return Errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("request body larger than %d bytes", maxBytes))
	case err != nil:
		return BadRequest("reading the request body: " + err.Error())
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return BadRequest("the request needs a JSON body")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return BadRequest(fmt.Sprintf("%s: expected %s, got %s", te.Field, te.Type, te.Value))
		}
		return BadRequest("the request body is not valid JSON: " + err.Error())
	}
	if dec.More() {
		return BadRequest("the request body has data after its JSON value")
	}
	return nil
}
