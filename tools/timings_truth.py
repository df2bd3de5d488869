#!/usr/bin/env python3
"""Build a corpus of real speech with exact word timings, for scoring word
and character timings (benches/timings_accuracy.py).

espeak-ng speaks hand-written sentences in ten languages (en, de, fr, es,
it, pt, nl, pl, ru, cmn), 12 utterances each of 1-4 sentences with ordinary
punctuation and a few numbers ("42", "1942", "1999"), at three rates (140,
175, 220 words per minute): 360 utterances. While it speaks, its C API
(libespeak-ng.so.1, reached with ctypes) reports a word event for each word
with the sample index at which espeak starts that word in its own output;
that index is the truth.

Output, per utterance NAME = LANG-RATE-NN in --out DIR:
  NAME.wav   mono 16-bit PCM at espeak's rate (22050 Hz)
  NAME.txt   the exact UTF-8 text spoken (no trailing newline)
  NAME.json  {"lang", "rate_wpm", "sample_rate", "duration_ms", "voice",
              "words": [{"text", "char_start", "char_end", "start_ms",
                         "onset_ms", "end_ms"}]}
plus manifest.json (espeak version, voices, rates, counts, definitions).

Definitions (char offsets are 0-based code-point indices, char_end exclusive):
  word      a run of letters/digits/marks, joined across an inner apostrophe
            or hyphen ("l'homme", "là-bas", "1999"); each CJK ideograph is
            a word of its own (Mandarin: one character = one syllable, the
            unit espeak reports events for). A word is timed only if an
            espeak word event points at its first character; the few that
            espeak misplaces are left out of the truth and listed in
            manifest.json ("untimed_words"). If more than 5% of events
            point elsewhere, the event struct is read wrong: the build fails.
  start_ms  the sample of the word event that points at the word's first
            character (a number is spoken as several words: its first).
  onset_ms  start_ms moved past any digital silence (samples exactly 0)
            right at it: where the word's first non-zero sample is. They
            differ when a word begins with a stop closure or a short gap.
  end_ms    the last non-zero sample before the next word's start (before
            the end of the audio for the last word), exclusive. espeak's
            pauses are exact digital zeros, so this trims the pause after
            a word and nothing else (a word-final unreleased stop would be
            trimmed too; espeak releases its stops). Left out when the next
            word is untimed (espeak spoke the two as one dictionary entry).

Deterministic: same espeak-ng build, same bytes (no randomness, no clock).
Stdlib only.

Usage: python3 tools/timings_truth.py --out target/timings-corpus
           [--langs en,de] [--rates 140,175,220]
"""

import argparse
import array
import ctypes as C
import json
import os
import sys
import unicodedata
import wave

RATES = (140, 175, 220)

# espeak voice name for each language code (espeak_SetVoiceByName falls
# back to a language match, so the code is enough).
VOICES = {
    "en": "en", "de": "de", "fr": "fr", "es": "es", "it": "it",
    "pt": "pt", "nl": "nl", "pl": "pl", "ru": "ru", "cmn": "cmn",
}

SENTENCES = {
    "en": [
        "The train to the coast leaves at seven, so we should hurry.",
        "Have you ever seen the ocean at night? It looks completely different.",
        "My grandmother was born in 1942. She still remembers the old house by the river.",
        "Please close the window, turn off the lights, and lock the door before you leave.",
        "Why is the sky blue? Because sunlight is scattered by the air.",
        "We planted 42 trees along the road last spring. Most of them survived the winter, and a few are already taller than me.",
        "Thank you for calling. Your appointment is on Tuesday morning.",
        "The library opens early on weekdays, but on Sundays it stays closed.",
        "In 1999, the whole town gathered in the square to watch the fireworks.",
        "Could you tell me where the nearest pharmacy is? I think I left my medicine at home. It is not far, is it?",
        "Cooking is simple when you have fresh vegetables, good bread, and a little patience.",
        "The meeting ran late again. Nobody knew what to say, so the manager ended it. Everyone went home tired. We will try again on Friday.",
    ],
    "de": [
        "Der Zug nach Hamburg fährt um sieben Uhr ab, also müssen wir uns beeilen.",
        "Hast du schon einmal das Meer bei Nacht gesehen? Es sieht ganz anders aus.",
        "Meine Großmutter wurde 1942 geboren. Sie erinnert sich noch gut an das alte Haus am Fluss.",
        "Bitte schließ das Fenster, mach das Licht aus und sperr die Tür ab, bevor du gehst.",
        "Warum ist der Himmel blau? Weil das Sonnenlicht in der Luft gestreut wird.",
        "Im letzten Frühling haben wir 42 Bäume an der Straße gepflanzt. Die meisten haben den Winter überstanden.",
        "Vielen Dank für Ihren Anruf. Ihr Termin ist am Dienstagmorgen.",
        "Die Bibliothek öffnet werktags früh, aber am Sonntag bleibt sie geschlossen.",
        "Im Jahr 1999 versammelte sich die ganze Stadt auf dem Marktplatz, um das Feuerwerk zu sehen.",
        "Können Sie mir sagen, wo die nächste Apotheke ist? Ich habe meine Tabletten zu Hause vergessen. Es ist nicht weit, oder?",
        "Kochen ist einfach, wenn man frisches Gemüse, gutes Brot und ein wenig Geduld hat.",
        "Die Besprechung dauerte wieder zu lange. Niemand wusste mehr, was er sagen sollte. Am Ende gingen alle müde nach Hause. Morgen versuchen wir es noch einmal.",
    ],
    "fr": [
        "Le train pour Marseille part à sept heures, alors il faut se dépêcher.",
        "As-tu déjà vu la mer la nuit ? Elle est complètement différente.",
        "Ma grand-mère est née en 1942. Elle se souvient encore de la vieille maison près de la rivière.",
        "Ferme la fenêtre, éteins la lumière et verrouille la porte avant de partir.",
        "Pourquoi le ciel est-il bleu ? Parce que la lumière du soleil est diffusée par l'air.",
        "Au printemps dernier, nous avons planté 42 arbres le long de la route. La plupart ont survécu à l'hiver.",
        "Merci de votre appel. Votre rendez-vous est prévu mardi matin.",
        "La bibliothèque ouvre tôt en semaine, mais le dimanche, elle reste fermée.",
        "En 1999, toute la ville s'est réunie sur la place pour regarder le feu d'artifice.",
        "Pourriez-vous me dire où se trouve la pharmacie la plus proche ? J'ai oublié mes médicaments à la maison. Ce n'est pas loin, n'est-ce pas ?",
        "La cuisine est simple quand on a des légumes frais, du bon pain et un peu de patience.",
        "La réunion a encore duré trop longtemps. Personne ne savait quoi dire. Finalement, tout le monde est rentré fatigué. Nous essaierons de nouveau vendredi.",
    ],
    "es": [
        "El tren a Valencia sale a las siete, así que tenemos que darnos prisa.",
        "¿Alguna vez has visto el mar de noche? Parece completamente distinto.",
        "Mi abuela nació en 1942. Todavía recuerda la casa vieja junto al río.",
        "Por favor, cierra la ventana, apaga las luces y cierra la puerta con llave antes de salir.",
        "¿Por qué el cielo es azul? Porque el aire dispersa la luz del sol.",
        "La primavera pasada plantamos 42 árboles junto a la carretera. La mayoría sobrevivió al invierno.",
        "Gracias por su llamada. Su cita es el martes por la mañana.",
        "La biblioteca abre temprano entre semana, pero los domingos permanece cerrada.",
        "En 1999, todo el pueblo se reunió en la plaza para ver los fuegos artificiales.",
        "¿Podría decirme dónde está la farmacia más cercana? Creo que dejé mis medicinas en casa. No está lejos, ¿verdad?",
        "Cocinar es sencillo cuando tienes verduras frescas, buen pan y un poco de paciencia.",
        "La reunión volvió a alargarse demasiado. Nadie sabía qué decir. Al final, todos se fueron a casa cansados. Lo intentaremos otra vez el viernes.",
    ],
    "it": [
        "Il treno per Napoli parte alle sette, quindi dobbiamo sbrigarci.",
        "Hai mai visto il mare di notte? Sembra completamente diverso.",
        "Mia nonna è nata nel 1942. Ricorda ancora la vecchia casa vicino al fiume.",
        "Per favore, chiudi la finestra, spegni la luce e chiudi la porta a chiave prima di uscire.",
        "Perché il cielo è azzurro? Perché la luce del sole viene diffusa dall'aria.",
        "La primavera scorsa abbiamo piantato 42 alberi lungo la strada. Quasi tutti hanno superato l'inverno.",
        "Grazie per la sua chiamata. Il suo appuntamento è martedì mattina.",
        "La biblioteca apre presto nei giorni feriali, ma la domenica resta chiusa.",
        "Nel 1999, tutto il paese si riunì in piazza per guardare i fuochi d'artificio.",
        "Mi può dire dove si trova la farmacia più vicina? Ho dimenticato le medicine a casa. Non è lontana, vero?",
        "Cucinare è semplice quando hai verdure fresche, pane buono e un po' di pazienza.",
        "La riunione è durata di nuovo troppo a lungo. Nessuno sapeva cosa dire. Alla fine, tutti sono tornati a casa stanchi. Riproveremo venerdì.",
    ],
    "pt": [
        "O comboio para o Porto parte às sete, por isso temos de nos apressar.",
        "Já alguma vez viste o mar à noite? Parece completamente diferente.",
        "A minha avó nasceu em 1942. Ainda se lembra da velha casa junto ao rio.",
        "Por favor, fecha a janela, apaga as luzes e tranca a porta antes de saíres.",
        "Porque é que o céu é azul? Porque a luz do sol é espalhada pelo ar.",
        "Na primavera passada plantámos 42 árvores ao longo da estrada. A maioria sobreviveu ao inverno.",
        "Obrigado pela sua chamada. A sua consulta é na terça de manhã.",
        "A biblioteca abre cedo durante a semana, mas ao domingo fica fechada.",
        "Em 1999, a cidade inteira juntou-se na praça para ver o fogo de artifício.",
        "Pode dizer-me onde fica a farmácia mais próxima? Acho que deixei os medicamentos em casa. Não é longe, pois não?",
        "Cozinhar é simples quando se tem legumes frescos, pão bom e um pouco de paciência.",
        "A reunião voltou a demorar demasiado. Ninguém sabia o que dizer. No fim, todos foram para casa cansados. Vamos tentar outra vez na sexta.",
    ],
    "nl": [
        "De trein naar Utrecht vertrekt om zeven uur, dus we moeten opschieten.",
        "Heb je de zee ooit in het donker gezien? Die ziet er heel anders uit.",
        "Mijn oma is in 1942 geboren. Ze herinnert zich het oude huis bij de rivier nog goed.",
        "Doe alsjeblieft het raam dicht, zet het licht uit en sluit de deur af voordat je weggaat.",
        "Waarom is de lucht blauw? Omdat het zonlicht door de lucht wordt verstrooid.",
        "Vorig voorjaar hebben we 42 bomen langs de weg geplant. De meeste hebben de winter overleefd.",
        "Bedankt voor uw telefoontje. Uw afspraak is op dinsdagochtend.",
        "De bibliotheek gaat doordeweeks vroeg open, maar op zondag blijft ze dicht.",
        "In 1999 kwam de hele stad samen op het plein om naar het vuurwerk te kijken.",
        "Kunt u me zeggen waar de dichtstbijzijnde apotheek is? Ik heb mijn medicijnen thuis laten liggen. Het is niet ver, toch?",
        "Koken is eenvoudig als je verse groenten, goed brood en een beetje geduld hebt.",
        "De vergadering liep weer veel te lang uit. Niemand wist nog wat hij moest zeggen. Uiteindelijk ging iedereen moe naar huis. Vrijdag proberen we het opnieuw.",
    ],
    "pl": [
        "Pociąg do Krakowa odjeżdża o siódmej, więc musimy się pospieszyć.",
        "Czy widziałeś kiedyś morze nocą? Wygląda zupełnie inaczej.",
        "Moja babcia urodziła się w 1942 roku. Wciąż pamięta stary dom nad rzeką.",
        "Zamknij proszę okno, zgaś światło i zamknij drzwi na klucz, zanim wyjdziesz.",
        "Dlaczego niebo jest niebieskie? Ponieważ powietrze rozprasza światło słoneczne.",
        "Zeszłej wiosny posadziliśmy 42 drzewa wzdłuż drogi. Większość z nich przetrwała zimę.",
        "Dziękujemy za telefon. Pańska wizyta jest we wtorek rano.",
        "Biblioteka otwiera się wcześnie w dni powszednie, ale w niedzielę jest zamknięta.",
        "W 1999 roku całe miasto zebrało się na rynku, żeby oglądać fajerwerki.",
        "Czy może mi pan powiedzieć, gdzie jest najbliższa apteka? Zostawiłem leki w domu. To niedaleko, prawda?",
        "Gotowanie jest proste, kiedy masz świeże warzywa, dobry chleb i trochę cierpliwości.",
        "Zebranie znowu się przeciągnęło. Nikt nie wiedział, co powiedzieć. W końcu wszyscy wrócili zmęczeni do domu. Spróbujemy jeszcze raz w piątek.",
    ],
    "ru": [
        "Поезд в Москву отправляется в семь часов, так что нам нужно поторопиться.",
        "Ты когда-нибудь видел море ночью? Оно выглядит совсем иначе.",
        "Моя бабушка родилась в 1942 году. Она до сих пор помнит старый дом у реки.",
        "Пожалуйста, закрой окно, выключи свет и запри дверь перед уходом.",
        "Почему небо голубое? Потому что воздух рассеивает солнечный свет.",
        "Прошлой весной мы посадили 42 дерева вдоль дороги. Большинство из них пережили зиму.",
        "Спасибо за ваш звонок. Ваша запись назначена на утро вторника.",
        "Библиотека открывается рано по будням, но в воскресенье она закрыта.",
        "В 1999 году весь город собрался на площади, чтобы посмотреть салют.",
        "Не подскажете, где ближайшая аптека? Я забыл лекарства дома. Это недалеко, правда?",
        "Готовить просто, когда у тебя есть свежие овощи, хороший хлеб и немного терпения.",
        "Совещание опять затянулось. Никто не знал, что сказать. В конце концов все разошлись по домам уставшими. Попробуем ещё раз в пятницу.",
    ],
    "cmn": [
        "去海边的火车七点出发，所以我们得快点。",
        "你晚上看过大海吗？看起来完全不一样。",
        "我奶奶出生在农村。她还记得河边的那座老房子。",
        "请关上窗户，关掉灯，出门前把门锁好。",
        "天空为什么是蓝色的？因为阳光被空气散射了。",
        "去年春天我们在路边种了很多树。大部分都活过了冬天。",
        "谢谢您的来电。您的预约在星期二上午。",
        "图书馆工作日开得很早，但是星期天不开门。",
        "那年春节，全城的人都聚在广场上看烟花。",
        "请问最近的药店在哪里？我把药忘在家里了。不远吧？",
        "有新鲜的蔬菜、好面包和一点耐心，做饭就很简单。",
        "会议又开得太久了。大家都不知道该说什么。最后所有人都累着回家了。星期五我们再试一次。",
    ],
}

# ---- espeak-ng C API (include/espeak-ng/speak_lib.h) -----------------------

AUDIO_OUTPUT_SYNCHRONOUS = 2
POS_CHARACTER = 1
ESPEAK_CHARS_UTF8 = 1
ESPEAK_RATE = 1
EVENT_LIST_TERMINATED = 0
EVENT_WORD = 1


class _EventId(C.Union):
    _fields_ = [("number", C.c_int), ("name", C.c_char_p), ("string", C.c_char * 8)]


class EspeakEvent(C.Structure):
    """espeak_EVENT. text_position is 1-based, in characters of the text;
    sample is the event's sample index in the output (audio_position is
    the same in whole ms)."""

    _fields_ = [
        ("type", C.c_int),
        ("unique_identifier", C.c_uint),
        ("text_position", C.c_int),
        ("length", C.c_int),
        ("audio_position", C.c_int),
        ("sample", C.c_int),
        ("user_data", C.c_void_p),
        ("id", _EventId),
    ]


class _Voice(C.Structure):
    _fields_ = [
        ("name", C.c_char_p), ("languages", C.c_char_p), ("identifier", C.c_char_p),
        ("gender", C.c_ubyte), ("age", C.c_ubyte), ("variant", C.c_ubyte),
        ("xx1", C.c_ubyte), ("score", C.c_int), ("spare", C.c_void_p),
    ]


_CALLBACK = C.CFUNCTYPE(C.c_int, C.POINTER(C.c_short), C.c_int, C.POINTER(EspeakEvent))


class Espeak:
    """One synchronous espeak-ng instance: speak(text) -> (samples, word events)."""

    def __init__(self, lib="libespeak-ng.so.1"):
        try:
            self.lib = C.CDLL(lib)
        except OSError as e:
            sys.exit(f"cannot load {lib} ({e}); install espeak-ng (Debian: apt-get install -y espeak-ng)")
        L = self.lib
        L.espeak_Initialize.argtypes = [C.c_int, C.c_int, C.c_char_p, C.c_int]
        L.espeak_Initialize.restype = C.c_int
        L.espeak_SetSynthCallback.argtypes = [_CALLBACK]
        L.espeak_SetVoiceByName.argtypes = [C.c_char_p]
        L.espeak_SetParameter.argtypes = [C.c_int, C.c_int, C.c_int]
        L.espeak_Synth.argtypes = [C.c_char_p, C.c_size_t, C.c_uint, C.c_int, C.c_uint,
                                   C.c_uint, C.c_void_p, C.c_void_p]
        L.espeak_GetCurrentVoice.restype = C.POINTER(_Voice)
        L.espeak_Info.argtypes = [C.c_void_p]
        L.espeak_Info.restype = C.c_char_p
        self.sample_rate = L.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, None, 0)
        if self.sample_rate <= 0:
            sys.exit("espeak_Initialize failed (espeak-ng-data missing?)")
        self.version = L.espeak_Info(None).decode()
        self._pcm = array.array("h")
        self._events = []
        self._cb = _CALLBACK(self._on_synth)  # keep a reference: espeak holds the pointer
        L.espeak_SetSynthCallback(self._cb)

    def _on_synth(self, wav, n, events):
        if wav and n > 0:
            self._pcm.frombytes(C.string_at(wav, n * 2))
        i = 0
        while events[i].type != EVENT_LIST_TERMINATED:
            e = events[i]
            if e.type == EVENT_WORD:
                self._events.append((e.text_position, e.length, e.sample, e.audio_position))
            i += 1
        return 0

    def set_voice(self, name):
        if self.lib.espeak_SetVoiceByName(name.encode()) != 0:
            sys.exit(f"espeak-ng has no voice {name!r}")
        v = self.lib.espeak_GetCurrentVoice().contents
        return f"{v.name.decode()} ({v.identifier.decode()})"

    def speak(self, text, rate):
        """Speak text at rate wpm; return (int16 samples, [(pos1, length, sample, ms)])."""
        self.lib.espeak_SetParameter(ESPEAK_RATE, rate, 0)
        self._pcm = array.array("h")
        self._events = []
        b = text.encode("utf-8")
        if self.lib.espeak_Synth(b, len(b) + 1, 0, POS_CHARACTER, 0, ESPEAK_CHARS_UTF8, None, None) != 0:
            sys.exit("espeak_Synth failed")
        self.lib.espeak_Synchronize()
        return self._pcm, self._events


# ---- words and their times ------------------------------------------------


def is_cjk(ch):
    return unicodedata.category(ch) == "Lo" and (
        "\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff" or "\U00020000" <= ch <= "\U0003134f")


def is_word_char(ch):
    return unicodedata.category(ch)[0] in "LNM"


def words_of(text):
    """[(char_start, char_end)] of the text's words (see module docstring)."""
    out, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if is_cjk(ch):
            out.append((i, i + 1))
            i += 1
            continue
        if not is_word_char(ch):
            i += 1
            continue
        j = i + 1
        while j < n:
            c = text[j]
            if is_word_char(c) and not is_cjk(c):
                j += 1
            elif c in "'’-" and j + 1 < n and is_word_char(text[j + 1]) and not is_cjk(text[j + 1]):
                j += 2
            else:
                break
        out.append((i, j))
        i = j
    return out


def time_words(text, pcm, events, sr):
    """Truth words and the untimed ones: ([{text, char_start, char_end,
    start_ms, onset_ms, end_ms}], [untimed word texts], stray event count).

    Each word event (in output order) is classed by the word its text
    position falls in: the word's head (it points at the word's first
    character, the word has no head yet and comes after the last headed
    word), a part of a number already headed ("1999" is spoken as several
    words), or stray (espeak sometimes reports a wrong position, e.g. its
    event for "of" in "Most of them" points inside "Most"). A stray event
    still marks where espeak starts some word, so it bounds the previous
    word's end; the word it belongs to has no head and is left untimed.
    """
    spans = words_of(text)
    owner = {}
    for k, (a, b) in enumerate(spans):
        for i in range(a, b):
            owner[i] = k
    head = {}          # word index -> start sample
    bounds = []        # (sample, word index or None): every event that starts a word
    last = -1
    strays = 0
    for pos1, length, s, _ms in sorted(events, key=lambda e: e[2]):
        if length <= 0 or pos1 <= 0:
            continue  # espeak emits a few empty events (elisions, end of text)
        k = owner.get(pos1 - 1)
        if k is not None and k not in head and k > last and pos1 - 1 == spans[k][0]:
            head[k] = s
            last = k
            bounds.append((s, k))
        elif k is not None and k in head and any(ch.isdigit() for ch in text[spans[k][0]:spans[k][1]]):
            pass  # a later part of a number
        else:
            strays += 1
            bounds.append((s, None))
    n = len(pcm)
    words, untimed = [], []
    for k, (a, b) in enumerate(spans):
        if k not in head:
            untimed.append(text[a:b])
            continue
        s = head[k]
        limit = min([t for t, j in bounds if t > s and j != k] + [n])
        e = limit
        while e > s and pcm[e - 1] == 0:
            e -= 1
        o = s
        while o < e and pcm[o] == 0:
            o += 1
        word = {
            "text": text[a:b], "char_start": a, "char_end": b,
            "start_ms": round(s * 1000 / sr, 3),
            "onset_ms": round(o * 1000 / sr, 3),
        }
        # espeak speaks some word pairs as one dictionary entry ("tout le
        # monde", "Es ist") with one event: the next word is then untimed
        # and this word's audio runs into it, so its end is not known.
        if k + 1 == len(spans) or k + 1 in head:
            word["end_ms"] = round(e * 1000 / sr, 3)
        words.append(word)
    return words, untimed, strays


def write_wav(path, pcm, sr):
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        data = array.array("h", pcm)
        if sys.byteorder != "little":
            data.byteswap()
        w.writeframes(data.tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--langs", default=",".join(SENTENCES), help="comma list (default: all)")
    ap.add_argument("--rates", default=",".join(map(str, RATES)), help="comma list of wpm")
    args = ap.parse_args()
    langs = [x for x in args.langs.split(",") if x]
    rates = [int(x) for x in args.rates.split(",") if x]
    for lang in langs:
        if lang not in SENTENCES:
            sys.exit(f"unknown language {lang!r}; have {', '.join(SENTENCES)}")
    os.makedirs(args.out, exist_ok=True)

    es = Espeak()
    sr = es.sample_rate
    n_utt = n_words = 0
    total_ms = 0.0
    gaps = []  # onset - start, ms
    n_events = n_strays = 0
    untimed = []
    voices = {}
    for lang in langs:
        voices[lang] = es.set_voice(VOICES[lang])
        for rate in rates:
            for idx, text in enumerate(SENTENCES[lang], 1):
                name = f"{lang}-{rate}-{idx:02d}"
                pcm, events = es.speak(text, rate)
                words, missing, strays = time_words(text, pcm, events, sr)
                n_events += sum(1 for e in events if e[1] > 0 and e[0] > 0)
                n_strays += strays
                untimed += [f"{name}:{w}" for w in missing]
                duration_ms = round(len(pcm) * 1000 / sr, 3)
                write_wav(os.path.join(args.out, name + ".wav"), pcm, sr)
                with open(os.path.join(args.out, name + ".txt"), "w", encoding="utf-8") as f:
                    f.write(text)
                meta = {"lang": lang, "rate_wpm": rate, "sample_rate": sr,
                        "duration_ms": duration_ms, "voice": voices[lang], "words": words}
                with open(os.path.join(args.out, name + ".json"), "w", encoding="utf-8") as f:
                    json.dump(meta, f, ensure_ascii=False, indent=1)
                    f.write("\n")
                n_utt += 1
                n_words += len(words)
                total_ms += duration_ms
                gaps += [w["onset_ms"] - w["start_ms"] for w in words]
    if n_strays > 0.05 * n_events:
        sys.exit(f"{n_strays} of {n_events} espeak word events do not point at a word start: "
                 "the espeak_EVENT layout or the text offsets are read wrong")
    gaps.sort()
    manifest = {
        "espeak_ng": es.version, "sample_rate": sr, "languages": langs, "rates_wpm": rates,
        "voices": voices, "utterances": n_utt, "words": n_words,
        "audio_seconds": round(total_ms / 1000, 1),
        "word_events": n_events, "stray_events": n_strays, "untimed_words": untimed,
        "onset_minus_start_ms": {"median": gaps[len(gaps) // 2], "p90": gaps[int(0.9 * (len(gaps) - 1))],
                                 "max": gaps[-1], "nonzero": sum(g > 0 for g in gaps)},
        "definitions": __doc__[__doc__.index("Definitions"):__doc__.index("Deterministic")].strip(),
    }
    with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"timings corpus: {n_utt} utterances ({len(langs)} languages x {len(SENTENCES[langs[0]])} "
          f"x rates {','.join(map(str, rates))} wpm), {n_words} timed words ({len(untimed)} untimed), "
          f"{total_ms / 60000:.1f} min at {sr} Hz, espeak-ng {es.version} -> {args.out}")


if __name__ == "__main__":
    main()
