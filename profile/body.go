package profile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// readBack reads the first n bytes of resp's body and puts them back in
// front of the rest, so that the caller reads the body whole.
func readBack(resp *http.Response, n int64) ([]byte, error) {
	head, err := io.ReadAll(io.LimitReader(resp.Body, n))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	return head, err
}

// openAIUsage reads OpenAI's usage object: {"usage": {"prompt_tokens": P,
// "completion_tokens": C, "total_tokens": T}}, as Azure OpenAI sends it
// too. Only total_tokens is required (it is what the TPM quota counts);
// it is returned as Input, or split as prompt and completion when they
// add up to it.
func openAIUsage(body []byte) (Usage, error) {
	var v struct {
		Usage *struct {
			Prompt     *float64 `json:"prompt_tokens"`
			Completion *float64 `json:"completion_tokens"`
			Total      *float64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return Usage{}, fmt.Errorf("the answer's body is not JSON with a usage: %w", err)
	}
	if v.Usage == nil || v.Usage.Total == nil || *v.Usage.Total < 0 {
		return Usage{}, errors.New("the answer's body has no usage.total_tokens")
	}
	u := v.Usage
	if u.Prompt != nil && u.Completion != nil && *u.Prompt+*u.Completion == *u.Total {
		return Usage{Input: *u.Prompt, Output: *u.Completion}, nil
	}
	return Usage{Input: *u.Total}, nil
}

// anthropicUsage reads the Messages API's usage: {"usage":
// {"input_tokens": I, "cache_creation_input_tokens": W,
// "cache_read_input_tokens": R, "output_tokens": O}}. The input tokens
// per minute count I + W: Anthropic's rate limits page says cache reads do
// not count towards ITPM on most models (those whose limits are not
// marked with a dagger).
func anthropicUsage(body []byte) (Usage, error) {
	var v struct {
		Usage *struct {
			Input         *float64 `json:"input_tokens"`
			CacheCreation float64  `json:"cache_creation_input_tokens"`
			Output        *float64 `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return Usage{}, fmt.Errorf("the answer's body is not JSON with a usage: %w", err)
	}
	if v.Usage == nil || v.Usage.Input == nil || v.Usage.Output == nil || *v.Usage.Input < 0 || *v.Usage.Output < 0 || v.Usage.CacheCreation < 0 {
		return Usage{}, errors.New("the answer's body has no usage.input_tokens and usage.output_tokens")
	}
	return Usage{Input: *v.Usage.Input + v.Usage.CacheCreation, Output: *v.Usage.Output}, nil
}

// promptTokens reads usage.prompt_tokens from an OpenAI-style answer.
func promptTokens(body []byte) (float64, error) {
	var v struct {
		Usage *struct {
			Prompt *float64 `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return 0, fmt.Errorf("the answer's body is not JSON with a usage: %w", err)
	}
	if v.Usage == nil || v.Usage.Prompt == nil || *v.Usage.Prompt < 0 {
		return 0, errors.New("the answer's body has no usage.prompt_tokens")
	}
	return *v.Usage.Prompt, nil
}
