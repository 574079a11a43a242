// Tessera: a C++ cycle loop around the Verilated training core (tessera_training_core).
//
// One file, two uses (sim/verilated/build.py compiles it twice):
//  * a shared library (-DTESSERA_LIB) that Python drives with ctypes at step boundaries
//    (sim/verilated/core.py): whole host-command batches run inside C++;
//  * a bare executable (-DTESSERA_BARE) that replays a recorded command stream with no
//    Python at all: the reference speed the training run is compared with.
// Both use the same cycle loop (tess_transact), so the two speeds differ only by what
// happens outside it.
//
// Host protocol (hdl/core/host.py): a stream `cmd` (payload CMD_BITS) into the core, a stream
// `rsp` (payload RSP_BITS) out, one response per command, in order. Payloads wider than 64
// bits are Verilator VlWide arrays of 32-bit words; build.py only builds cores whose payloads
// are wide (every preset's are), and passes CMD_WORDS / RSP_WORDS.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <vector>

#include "Vcore.h"
#include "verilated.h"

// Verilator escapes "__" in port names (Amaranth's `cmd__valid` becomes `cmd___05Fvalid`).
#define CMD_VALID cmd___05Fvalid
#define CMD_READY cmd___05Fready
#define CMD_PAYLOAD cmd___05Fpayload
#define RSP_VALID rsp___05Fvalid
#define RSP_READY rsp___05Fready
#define RSP_PAYLOAD rsp___05Fpayload

#ifndef CMD_WORDS
#error "CMD_WORDS must be defined (32-bit words of cmd__payload)"
#endif
#ifndef RSP_WORDS
#error "RSP_WORDS must be defined (32-bit words of rsp__payload)"
#endif

struct Tess {
    VerilatedContext* ctx;
    Vcore* top;
    uint64_t cycles;
};

static inline void tick(Tess* t) {
    // inputs were set with clk low and evaluated; the rising edge samples them
    t->top->clk = 1;
    t->top->eval();
    t->top->clk = 0;
    t->top->eval();
    t->cycles++;
}

extern "C" {

Tess* tess_new(void) {
    Tess* t = new Tess;
    t->ctx = new VerilatedContext;
    t->top = new Vcore{t->ctx};
    t->cycles = 0;
    t->top->clk = 0;
    t->top->rst = 0;
    t->top->CMD_VALID = 0;
    t->top->RSP_READY = 0;
    t->top->eval();
    return t;
}

void tess_free(Tess* t) {
    t->top->final();
    delete t->top;
    delete t->ctx;
    delete t;
}

uint64_t tess_cycles(Tess* t) { return t->cycles; }
int tess_cmd_words(void) { return CMD_WORDS; }
int tess_rsp_words(void) { return RSP_WORDS; }

// Synchronous reset held for n cycles; the command stream is idle meanwhile.
void tess_reset(Tess* t, int n) {
    t->top->CMD_VALID = 0;
    t->top->RSP_READY = 0;
    t->top->rst = 1;
    t->top->eval();
    for (int i = 0; i < n; i++) tick(t);
    t->top->rst = 0;
    t->top->eval();
}

// Run n cycles with the host idle.
void tess_idle(Tess* t, uint64_t n) {
    t->top->CMD_VALID = 0;
    t->top->RSP_READY = 1;
    t->top->eval();
    for (uint64_t i = 0; i < n; i++) tick(t);
}

// Send ncmds commands (CMD_WORDS words each, little-endian words) and collect their
// responses (RSP_WORDS words each) into rsps, keeping the command stream busy while
// responses come back (a WRITE or READ streams at one line per cycle). Returns the number of
// responses collected: ncmds, or fewer if `deadline` cycles passed first (a hang).
int64_t tess_transact(Tess* t, const uint32_t* cmds, int64_t ncmds, uint32_t* rsps,
                      uint64_t deadline) {
    Vcore* top = t->top;
    int64_t sent = 0, got = 0;
    uint64_t start = t->cycles;
    top->RSP_READY = 1;
    while (got < ncmds) {
        if (t->cycles - start >= deadline) break;
        if (sent < ncmds) {
            top->CMD_VALID = 1;
            for (int w = 0; w < CMD_WORDS; w++) top->CMD_PAYLOAD[w] = cmds[sent * CMD_WORDS + w];
        } else {
            top->CMD_VALID = 0;
        }
        top->eval();                       // combinational ready/valid for this cycle
        bool cmd_fire = top->CMD_VALID && top->CMD_READY;
        bool rsp_fire = top->RSP_VALID;   // rsp__ready is held high
        if (rsp_fire) {
            for (int w = 0; w < RSP_WORDS; w++) rsps[got * RSP_WORDS + w] = top->RSP_PAYLOAD[w];
        }
        tick(t);
        if (cmd_fire) sent++;
        if (rsp_fire) got++;
    }
    top->CMD_VALID = 0;
    top->eval();
    return got;
}

}  // extern "C"

#ifdef TESSERA_BARE
// Replay a recorded command stream: file of uint64 header words then payloads.
//   header: magic 0x54455353, n_batches; per batch: ncmds, deadline, then ncmds*CMD_WORDS
//   uint32 words. Prints JSON: cycles, seconds, cycles_per_second (time of the replay only).
int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s COMMANDS.bin\n", argv[0]);
        return 2;
    }
    FILE* f = std::fopen(argv[1], "rb");
    if (!f) { std::perror(argv[1]); return 2; }
    uint64_t hdr[2];
    if (std::fread(hdr, 8, 2, f) != 2 || hdr[0] != 0x54455353u) {
        std::fprintf(stderr, "%s: not a command recording\n", argv[1]);
        return 2;
    }
    struct Batch { uint64_t deadline; std::vector<uint32_t> cmds; int64_t n; };
    std::vector<Batch> batches(hdr[1]);
    for (auto& b : batches) {
        uint64_t bh[2];
        if (std::fread(bh, 8, 2, f) != 2) { std::fprintf(stderr, "truncated\n"); return 2; }
        b.n = (int64_t)bh[0];
        b.deadline = bh[1];
        b.cmds.resize(b.n * CMD_WORDS);
        if (std::fread(b.cmds.data(), 4, b.cmds.size(), f) != b.cmds.size()) {
            std::fprintf(stderr, "truncated\n");
            return 2;
        }
    }
    std::fclose(f);
    Tess* t = tess_new();
    tess_reset(t, 4);
    uint64_t c0 = tess_cycles(t);
    std::vector<uint32_t> rsps;
    auto t0 = std::chrono::steady_clock::now();
    for (auto& b : batches) {
        rsps.resize(b.n * RSP_WORDS);
        if (tess_transact(t, b.cmds.data(), b.n, rsps.data(), b.deadline) != b.n) {
            std::fprintf(stderr, "deadline passed\n");
            return 1;
        }
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t n = tess_cycles(t) - c0;
    std::printf("{\"cycles\": %llu, \"seconds\": %.6f, \"cycles_per_second\": %.1f}\n",
                (unsigned long long)n, s, n / s);
    tess_free(t);
    return 0;
}
#endif
