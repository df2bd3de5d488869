"""Word timings as the agent frameworks use them: what the bot said, as far as
it was heard, lands in the LLM context.

- Pipecat's ElevenLabsTTSService (multi-stream-input `alignment`) and
  CartesiaTTSService (`timestamps` with `add_timestamps`) in a pipeline that
  ends as a real bot's does: the output transport plays the audio in real time
  (a `BaseOutputTransport` that writes to nowhere at the audio's pace), which
  releases each word's TTSTextFrame at its play time, and then Pipecat's
  assistant context aggregator writes the spoken words into an `LLMContext`.
- LiveKit Agents' ElevenLabs plugin (`sync_alignment=true`) and Cartesia
  plugin (`add_timestamps`), driven standalone: the `TimedString`s their
  streams attach to the audio frames (`lk.timed_transcripts`).

Verified: a reply that plays to its end leaves its whole text as the
context's assistant message, and the words the server timed are the reply's
words, in order, at non-decreasing times within the reply's audio. A reply
interrupted (as a user turn interrupts: UserStartedSpeakingFrame and an
InterruptionFrame) once about 1 s of its audio has been played leaves only a
non-empty prefix of its words in the context: never the whole reply, and no
more words than were timed up to the moment the interruption took effect
(plus one, for a word released at that instant); the server cancels the
interrupted context, and the next turn still speaks and lands in the context.
LiveKit's timed transcripts hold the reply's words in order, with
non-decreasing start times and end times within the audio. The random-weight
fixture's "speech" is noise-like, so these test the timing contract (words
arrive, in order, within the audio; the interruption cuts them), not how well
a word's time matches its sound. No timing-performance assertions: timeouts
only turn hangs into failures. The interruption runs on a server allowed
LONG_FRAMES frames a request, so the reply is still being generated when it
is cut. Pipecat sends a reply's sentences with no space between them; the
server puts one there, so each word of both sentences is timed on its own
(not "that.Tell").
"""

from __future__ import annotations

import asyncio
import os
import re
import time

import pytest

# Nothing may phone home: no proxies for loopback, no vendor keys in the env.
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost,::1"
for k in (
    "ELEVENLABS_API_KEY",
    "ELEVEN_API_KEY",
    "CARTESIA_API_KEY",
    "CARTESIA_BASE_URL",
    "LIVEKIT_URL",
):
    os.environ.pop(k, None)

pytest.importorskip("pipecat")

from pipecat.frames.frames import (  # noqa: E402
    ErrorFrame,
    InterruptionFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
    TTSTextFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineParams, PipelineWorker  # noqa: E402
from pipecat.processors.aggregators.llm_context import LLMContext  # noqa: E402
from pipecat.processors.aggregators.llm_response_universal import (  # noqa: E402
    LLMContextAggregatorPair,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: E402
from pipecat.services.cartesia.tts import CartesiaTTSService  # noqa: E402
from pipecat.transports.base_output import BaseOutputTransport  # noqa: E402
from pipecat.transports.base_transport import TransportParams  # noqa: E402

from conftest import serve  # noqa: E402
from test_vendor import pipecat_elevenlabs, running, tokens  # noqa: E402

RATE = 16000
TIMEOUT = 120

SHORT = "Hello there, how are you doing today?"
# Long enough to be mid-sentence after 1 s of audio: several sentences, each
# its own request, each up to the server's frame cap.
LONG = (
    "Well, that is a long story. It started many years ago in a small town. "
    "The people there were kind and quiet. Every morning the baker opened his shop. "
    "Then the children walked to school together."
)
NEXT = "Okay, let us talk about something else."
TWO_SENTENCES = "Sure, I can help with that. Tell me where you are going."
# Codec frames per request for these tests' server (12.5 a second).
LONG_FRAMES = 150


def words(text: str) -> list[str]:
    """The words of a text as a listener's transcript has them: split at
    whitespace, lower case, punctuation dropped (so words run together, as in
    "story.It", stay one word and do not match)."""
    return [w for w in (re.sub(r"[^\w']", "", t).lower() for t in text.split()) if w]


class RealtimeOutput(BaseOutputTransport):
    """An output transport that plays audio to nowhere at the audio's own pace
    (each write returns when its chunk has been "heard"), so the transport's
    clock releases word frames as a device-backed transport would."""

    def __init__(self):
        super().__init__(TransportParams(audio_out_enabled=True, audio_out_end_silence_secs=0))
        self.played_s = 0.0  # seconds of audio played since reset()
        self._until = 0.0  # monotonic time the audio written so far ends

    def reset(self):
        self.played_s = 0.0

    async def start(self, frame):
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def write_audio_frame(self, frame) -> bool:
        secs = len(frame.audio) / (2 * frame.num_channels * frame.sample_rate)
        now = time.monotonic()
        self._until = max(self._until, now) + secs
        await asyncio.sleep(self._until - now)
        self.played_s += secs
        return True


class Tap(FrameProcessor):
    """Between the TTS and the output: the reply's audio as it leaves the TTS
    (its first chunk is the word clock's zero) and errors."""

    def __init__(self):
        super().__init__()
        self.audio_bytes = 0
        self.first_audio: float | None = None  # monotonic
        self.errors: list[str] = []
        self.got_audio = asyncio.Event()

    def reset(self):
        self.audio_bytes = 0
        self.first_audio = None
        self.got_audio.clear()

    async def process_frame(self, frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame) and direction == FrameDirection.DOWNSTREAM:
            if self.first_audio is None:
                self.first_audio = time.monotonic()
            self.audio_bytes += len(frame.audio)
            self.got_audio.set()
        elif isinstance(frame, ErrorFrame):
            self.errors.append(frame.error)
        await self.push_frame(frame, direction)


class Heard(FrameProcessor):
    """After the output: the word frames as the transport's clock releases
    them, with how much audio had been played by then."""

    def __init__(self, out: RealtimeOutput):
        super().__init__()
        self.out = out
        self.released: list[tuple[str, float]] = []
        self.stopped = 0  # TTSStoppedFrames: each after all its context's audio was played

    async def process_frame(self, frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSTextFrame) and direction == FrameDirection.DOWNSTREAM:
            self.released.append((frame.text, self.out.played_s))
        elif isinstance(frame, TTSStoppedFrame) and direction == FrameDirection.DOWNSTREAM:
            self.stopped += 1
        await self.push_frame(frame, direction)


def record_word_times(tts) -> list[tuple[str, float]]:
    """The words the service derived from the server's timings, with their
    times (seconds from the start of the context's audio), as it hands them to
    its word clock."""
    timed: list[tuple[str, float]] = []
    add = tts.add_word_timestamps

    async def add_word_timestamps(word_times, context_id=None, *args, **kwargs):
        # (words of a context already dropped, after an interruption, the
        # service drops too: they are timed on a clock it has reset)
        if context_id is None or tts.audio_context_available(context_id):
            timed.extend((w, float(t)) for w, t in word_times)
        return await add(word_times, context_id, *args, **kwargs)

    tts.add_word_timestamps = add_word_timestamps
    return timed


def check_timed(timed, reply: str, audio_s: float, *, whole: bool, boundaries: bool = False):
    """The timed words are the reply's words in order (all of them, but for a
    last word some clients only complete at the context's end, when `whole`),
    at non-decreasing times within the audio. Unless `boundaries`, two words
    timed as one across a sentence boundary ("that.Tell") count as both: see
    test_pipecat_timed_words_keep_sentence_boundaries."""
    split = words if boundaries else (lambda t: re.findall(r"[a-z0-9']+", t.lower()))
    got = [w for word, _ in timed for w in split(word)]
    want = split(reply)
    assert got == want[: len(got)], f"timed words {got} are not a prefix of {want}"
    if whole:
        assert len(got) >= len(want) - 1, f"only {got} of {want} were timed"
    times = [t for _, t in timed]
    assert all(t >= 0 for t in times), times
    assert times == sorted(times), f"word times go backwards: {timed}"
    assert not times or times[-1] <= audio_s + 0.05, f"a word starts after the audio ({audio_s:.2f} s): {timed}"


async def wait_for(predicate, what: str, timeout: float = TIMEOUT, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(step)


class Bot:
    """A bot's output half: the TTS, a real-time output, and Pipecat's
    assistant context aggregator writing into an LLMContext."""

    def __init__(self, tts):
        self.timed = record_word_times(tts)
        self.tap = Tap()
        self.out = RealtimeOutput()
        self.heard = Heard(self.out)
        self.context = LLMContext()
        _, assistant = LLMContextAggregatorPair(self.context)
        self.turns: list = []  # AssistantTurnStoppedMessage, in order

        @assistant.event_handler("on_assistant_turn_stopped")
        async def on_stopped(_aggregator, message):
            self.turns.append(message)

        self.task = PipelineWorker(
            Pipeline([tts, self.tap, self.out, self.heard, assistant]),
            params=PipelineParams(audio_out_sample_rate=RATE),
            enable_rtvi=False,
        )

    def assistant_messages(self) -> list[str]:
        return [m["content"] for m in self.context.get_messages() if m.get("role") == "assistant"]

    def audio_s(self) -> float:
        return self.tap.audio_bytes / (2 * RATE)

    async def reply(self, text: str) -> None:
        """Speaks an LLM reply to its end (its turn stopped, its audio played)."""
        self.timed.clear()
        self.heard.released.clear()
        self.tap.reset()
        self.out.reset()
        n, stopped = len(self.turns), self.heard.stopped
        await self.task.queue_frames(tokens(text))
        await wait_for(lambda: len(self.turns) > n, "the reply's end")
        assert not self.turns[-1].interrupted, self.turns[-1]
        await wait_for(lambda: self.heard.stopped > stopped, "the reply's audio to play out")
        assert self.audio_s() > 0.1, self.audio_s()
        assert not self.tap.errors, self.tap.errors


async def whole_reply(tts) -> None:
    """A reply of two sentences played to its end: the words the server timed
    are the reply's, and all of it lands in the context."""
    bot = Bot(tts)
    return await _whole_reply(bot, boundaries=False)


async def _whole_reply(bot, *, boundaries: bool) -> None:
    async with running(bot.task):
        await bot.reply(TWO_SENTENCES)
        diag = f"context {bot.assistant_messages()}; timed {bot.timed}; audio {bot.audio_s():.2f} s"
        assert words(bot.assistant_messages()[-1]) == words(TWO_SENTENCES), diag
        check_timed(bot.timed, TWO_SENTENCES, bot.audio_s(), whole=True, boundaries=boundaries)


async def interrupted_reply(tts, server) -> None:
    """A long reply interrupted once ~1 s of its audio was played, then a next
    reply."""
    bot = Bot(tts)
    async with running(bot.task):
        await bot.task.queue_frames(tokens(LONG))
        await wait_for(lambda: bot.out.played_s >= 1.0 or len(bot.turns) > 0, "1 s of the long reply played")
        assert not bot.turns, "the long reply ended before 1 s of it was played"
        played = bot.out.played_s
        # What a user turn sends down the pipeline (LLMUserAggregator
        # broadcasts these when the user starts speaking).
        await bot.task.queue_frames([UserStartedSpeakingFrame(), InterruptionFrame()])
        await wait_for(lambda: len(bot.turns) == 1, "the interrupted reply's end")
        assert bot.tap.first_audio is not None
        elapsed = time.monotonic() - bot.tap.first_audio  # on the word clock, by now
        timed = list(bot.timed)
        kept = words(bot.turns[0].content)
        want = words(LONG)
        diag = (
            f"kept {kept}; played {played:.2f} s at the interruption, {elapsed:.2f} s on the "
            f"word clock by its end; timed {timed}; released (word, played s) {bot.heard.released}"
        )
        assert bot.turns[0].interrupted, bot.turns[0]
        assert kept, f"no words of the interrupted reply in the context: {diag}"
        assert kept == want[: len(kept)], f"not a prefix of the reply: {diag}"
        assert len(kept) < len(want), f"the whole interrupted reply is in the context: {diag}"
        due = sum(len(re.findall(r"[a-z0-9']+", w.lower())) for w, t in timed if t <= elapsed)
        assert len(kept) <= due + 1, f"more words kept than were due by the interruption: {diag}"
        check_timed(timed, LONG, bot.audio_s(), whole=False)
        assert words(bot.assistant_messages()[-1]) == kept, bot.assistant_messages()
        await bot.task.queue_frames([UserStoppedSpeakingFrame()])

        # The next reply still speaks, and lands in the context after the cut one.
        await asyncio.sleep(0.3)
        await bot.reply(NEXT)
        assert words(bot.assistant_messages()[-1]) == words(NEXT), bot.assistant_messages()
        assert words(bot.assistant_messages()[-2]) == kept, bot.assistant_messages()
    # Whether the server still had the reply to cancel depends on how fast
    # the fixture made it (it may be all out before the user cuts in); the
    # cancel itself is test_vendor.py's. What the agent keeps is this test's.


def pipecat_cartesia(server) -> CartesiaTTSService:
    return CartesiaTTSService(
        api_key=server.token,
        voice_id="serena",
        model="sonic-2",
        url=f"ws://{server.addr}/tts/websocket",
        sample_rate=RATE,
    )


PIPECAT = {"elevenlabs": pipecat_elevenlabs, "cartesia": pipecat_cartesia}


@pytest.fixture(scope="module")
def long_server():
    """A server whose requests may run to LONG_FRAMES codec frames, so a long
    reply is still being spoken (and generated) when it is interrupted."""
    with serve("tiny-a", max_frames=LONG_FRAMES) as srv:
        yield srv


@pytest.mark.parametrize("vendor", ["elevenlabs", "cartesia"])
def test_pipecat_whole_reply_in_context(server, vendor):
    asyncio.run(asyncio.wait_for(whole_reply(PIPECAT[vendor](server)), TIMEOUT))


@pytest.mark.parametrize("vendor", ["elevenlabs", "cartesia"])
def test_pipecat_timed_words_keep_sentence_boundaries(server, vendor):
    bot = Bot(PIPECAT[vendor](server))
    asyncio.run(asyncio.wait_for(_whole_reply(bot, boundaries=True), TIMEOUT))


@pytest.mark.parametrize("vendor", ["elevenlabs", "cartesia"])
def test_pipecat_interrupted_reply_keeps_spoken_prefix(long_server, vendor):
    asyncio.run(asyncio.wait_for(interrupted_reply(PIPECAT[vendor](long_server), long_server), TIMEOUT * 2))


@pytest.mark.parametrize("vendor", ["elevenlabs", "cartesia"])
def test_livekit_timed_transcripts(server, vendor):
    pytest.importorskip("livekit.agents")
    import aiohttp
    from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT

    from test_livekit import RATE as LK_RATE
    from test_livekit import plugins

    reply = "Hello there, this is a streamed turn. It has two sentences."

    async def main():
        async with aiohttp.ClientSession() as http:
            tts = plugins(server, http)[vendor]
            assert tts.capabilities.aligned_transcript
            timed, samples = [], 0
            try:
                s = tts.stream()
                for w in reply.split(" "):
                    s.push_text(w + " ")
                s.flush()
                s.end_input()
                async with s as stream:
                    async for ev in stream:
                        samples += ev.frame.samples_per_channel
                        timed.extend(ev.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT) or [])
            finally:
                await tts.aclose()
        return timed, samples / LK_RATE

    timed, audio_s = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert audio_s > 0.1, audio_s
    got = [w for t in timed for w in words(str(t))]
    assert got == words(reply), f"timed transcript {[str(t) for t in timed]}"
    starts = [t.start_time for t in timed]
    ends = [t.end_time for t in timed]
    assert all(isinstance(x, float) for x in starts + ends), timed
    assert all(x >= 0 for x in starts), starts
    assert starts == sorted(starts), f"start times go backwards: {list(zip(map(str, timed), starts))}"
    assert all(e >= s for s, e in zip(starts, ends)), list(zip(starts, ends))
    assert ends[-1] <= audio_s + 0.05, f"a word ends after the audio ({audio_s:.2f} s): {ends}"
