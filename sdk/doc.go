// Package sdk is Hutch's Go client: create sandboxes, run commands and
// terminals in them, and read, write and watch their files.
//
// It speaks the E2B wire protocol — the control plane's REST API and the
// in-sandbox daemon's (envd) Connect services and /files — exactly as E2B's
// official JavaScript and Python SDKs do, so it works against `hutch serve`
// and against any E2B-compatible server. Its shape follows those SDKs,
// translated into Go: functions take a context, options are structs, and
// failures are errors that work with [errors.Is] and [errors.As].
//
// # Quick start
//
//	sbx, err := sdk.Create(ctx, sdk.CreateOptions{Template: "base"})
//	if err != nil {
//		return err
//	}
//	defer sbx.Kill(context.Background())
//
//	res, err := sbx.Commands.Run(ctx, "python3 -c 'print(6*7)'", nil)
//	if err != nil {
//		return err // *sdk.CommandExitError when the command exits non-zero
//	}
//	fmt.Print(res.Stdout) // 42
//
// # Running code
//
// In a sandbox of [CodeInterpreterTemplate], [Sandbox.RunCode] runs code
// in a stateful context as E2B's code interpreter SDKs do, and returns
// its [Execution]: results in every format, output and the error raised.
//
//	exec, err := sbx.RunCode(ctx, "x = 6 * 7\nx", nil)
//	fmt.Println(exec.Text()) // 42
//
// # Configuration
//
// Every entry point takes a [Config]. Fields left empty come from the
// environment, HUTCH_* first, then the names E2B's SDKs read:
//
//	APIKey      HUTCH_API_KEY      E2B_API_KEY
//	APIURL      HUTCH_API_URL      E2B_API_URL
//	SandboxURL  HUTCH_SANDBOX_URL  E2B_SANDBOX_URL
//	Domain      HUTCH_DOMAIN       E2B_DOMAIN
//
// With neither an API URL nor a domain, the client talks to a local
// `hutch serve` at http://127.0.0.1:3000. With a domain, it uses
// https://api.<domain> as E2B's SDKs do. Sandbox (envd) traffic goes to the
// sandbox URL when one is set, else to the API URL when that was set
// without a domain (`hutch serve` answers both on one listener), else to
// https://49983-<id>.<domain>; every envd request carries the
// E2b-Sandbox-Id and E2b-Sandbox-Port routing headers.
//
// # Errors
//
// Failures from the server are [*Error] values whose Kind is one of the
// sentinel errors ([ErrNotFound], [ErrAuthentication], [ErrTimeout],
// [ErrInvalidArgument], [ErrNotRunning], …); test them with errors.Is. A
// command that exits with a non-zero status returns [*CommandExitError]
// alongside its result. A cancelled or expired context ends the call with
// an error that matches the context's error.
package sdk
