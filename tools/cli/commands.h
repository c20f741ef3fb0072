// Subcommands of the `treespark` binary. Each lives in its own cmd_*.cc file and parses its own flags (CLI11).
// argv[0] is the subcommand name. Each returns the process exit code; ts::Error is caught in main().
#pragma once

namespace ts::cli {

int cmd_generate(int argc, char** argv);     // plain / speculative generation
int cmd_perplexity(int argc, char** argv);   // mean NLL over an ids file
int cmd_make_model(int argc, char** argv);   // write a random-weight checkpoint folder
int cmd_tokenize(int argc, char** argv);     // text -> ids
int cmd_detokenize(int argc, char** argv);   // ids -> text
int cmd_chat_format(int argc, char** argv);  // render a chat template
int cmd_calibrate(int argc, char** argv);    // fit (a, b) of the edge-acceptance calibration
int cmd_bench(int argc, char** argv);        // bench forward | tokenize | spec | serve
int cmd_serve(int argc, char** argv);        // the OpenAI-compatible HTTP server

}  // namespace ts::cli
