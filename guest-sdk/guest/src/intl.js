(function (native) {
  'use strict';
  // Intl for English, without ICU data: the formats agents print reports
  // with (numbers, currencies, units, dates in UTC or a fixed offset,
  // lists, plurals, relative times, sorting), as Node gives them for
  // en-US. Another locale is refused rather than formatted as en-US
  // (a "de-DE" number or an "en-GB" date read as American misleads).
  const LOCALE = 'en-US';
  const define = (target, name, value) => Object.defineProperty(target, name, {
    value, writable: true, enumerable: false, configurable: true,
  });
  const TAG = /^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$/;

  // The requested locales, canonicalised, as the standard reads them (an
  // array-like, not an iterable).
  function canonical(input, who) {
    if (input === undefined) return [];
    let list;
    if (typeof input === 'string') list = [input];
    else {
      const o = Object(input);
      const length = Math.min(Math.max(Math.floor(Number(o.length)) || 0, 0), 2 ** 32);
      list = [];
      for (let k = 0; k < length; k++) if (k in o) list.push(o[k]);
    }
    return list.map((tag) => {
      if (typeof tag !== 'string' || !TAG.test(tag)) {
        const hint = typeof tag === 'string' && tag.includes('_') ? `; write "${tag.replace(/_/g, '-')}"` : '';
        throw new RangeError(`${who}: "${String(tag)}" is not a BCP 47 language tag${hint}`);
      }
      const parts = tag.split('-');
      return parts.map((p, i) => i === 0 ? p.toLowerCase() : p.length === 2 ? p.toUpperCase()
        : p.length === 4 ? p[0].toUpperCase() + p.slice(1).toLowerCase() : p.toLowerCase()).join('-');
    });
  }
  // English as spoken in the US, or no language in particular.
  const english = (tag) => {
    const [language, ...rest] = tag.split('-');
    const region = rest.find((p) => /^([A-Z]{2}|\d{3})$/.test(p));
    return (language === 'en' || language === 'und') && (region === undefined || region === 'US');
  };
  function locales(input, who) {
    const list = canonical(input, who);
    if (list.length > 0 && !english(list[0])) {
      throw new RangeError(`${who}: only "en-US" formats are available in the sandbox, which has no locale data, not "${list[0]}"; pass "en-US" or leave the locale out (for an ISO date use date.toISOString())`);
    }
    return list;
  }
  function options(input) {
    if (input === undefined) return Object.create(null);
    if (input === null) throw new TypeError('Intl: options must be an object, not null');
    return Object(input);
  }
  function pick(o, name, allowed, fallback, who) {
    const v = o[name];
    if (v === undefined) return fallback;
    const s = String(v);
    if (!allowed.includes(s)) {
      throw new RangeError(`${who}: ${name} "${s}" is not one of ${allowed.map((a) => `"${a}"`).join(', ')}`);
    }
    return s;
  }
  function digits(o, name, min, max, fallback, who) {
    const v = o[name];
    if (v === undefined) return fallback;
    const n = Number(v);
    if (!Number.isFinite(n) || n < min || n > max) {
      throw new RangeError(`${who}: ${name} must be an integer from ${min} to ${max}, not ${String(v)}`);
    }
    return Math.floor(n);
  }
  function bool(o, name, fallback) {
    const v = o[name];
    return v === undefined ? fallback : Boolean(v);
  }
  const supported = (input, who) => canonical(input, who).filter(english);

  // ---- decimal arithmetic on the shortest digits of a double ----------

  // A finite number as { negative, digits, point }: |n| = 0.digits × 10^point.
  function decimal(n) {
    const negative = n < 0 || Object.is(n, -0);
    let s = typeof n === 'bigint' ? (negative ? -n : n).toString() : String(Math.abs(n));
    let exp = 0;
    const e = s.indexOf('e');
    if (e >= 0) { exp = Number(s.slice(e + 1)); s = s.slice(0, e); }
    const dot = s.indexOf('.');
    const whole = dot < 0 ? s : s.slice(0, dot);
    const all = whole + (dot < 0 ? '' : s.slice(dot + 1));
    const lead = all.length - all.replace(/^0+/, '').length;
    const ds = all.slice(lead).replace(/0+$/, '');
    return { negative, digits: ds, point: ds === '' ? 0 : whole.length + exp - lead };
  }
  // Keeps `keep` digits, rounding as `mode` says (ECMA-402's modes; the
  // default, halfExpand, rounds half away from zero).
  function round(d, keep, mode = 'halfExpand') {
    if (keep >= d.digits.length) return d;
    let digits = d.digits, point = d.point;
    if (keep < 0) { digits = '0'.repeat(-keep) + digits; point -= keep; keep = 0; }
    let head = digits.slice(0, keep);
    const rest = digits.slice(keep);
    // what is dropped, against half a unit (digits carry no trailing zeros)
    const half = rest[0] > '5' || (rest[0] === '5' && rest.length > 1) ? 1 : rest[0] === '5' ? 0 : -1;
    const odd = head.length > 0 && (head.charCodeAt(head.length - 1) & 1) === 1;
    const up = {
      ceil: !d.negative, floor: d.negative, expand: true, trunc: false,
      halfCeil: half > 0 || (half === 0 && !d.negative), halfFloor: half > 0 || (half === 0 && d.negative),
      halfExpand: half >= 0, halfTrunc: half > 0, halfEven: half > 0 || (half === 0 && odd),
    }[mode];
    if (up) {
      if (head === '') { head = '1'; point += 1; } else {
      let i = head.length - 1;
      while (i >= 0 && head[i] === '9') i--;
      if (i < 0) { head = '1'; point += 1; }
      else head = head.slice(0, i) + String.fromCharCode(head.charCodeAt(i) + 1);
      }
    }
    head = head.replace(/0+$/, '');
    return { negative: d.negative, digits: head, point: head === '' ? 0 : point };
  }
  // [integer digits, fraction digits] of a rounded decimal.
  function split(d, minInt, minFrac, minSig) {
    let int, frac;
    if (d.digits === '') { int = '0'; frac = ''; }
    else if (d.point <= 0) { int = '0'; frac = '0'.repeat(-d.point) + d.digits; }
    else if (d.point >= d.digits.length) { int = d.digits + '0'.repeat(d.point - d.digits.length); frac = ''; }
    else { int = d.digits.slice(0, d.point); frac = d.digits.slice(d.point); }
    if (minSig > 0) {
      const shown = d.digits === '' ? 1 : (d.point > 0 ? int.length + frac.length : frac.length - (frac.length - frac.replace(/^0+/, '').length));
      if (shown < minSig) minFrac = Math.max(minFrac, frac.length + (minSig - shown));
    }
    if (frac.length < minFrac) frac += '0'.repeat(minFrac - frac.length);
    if (int.length < minInt) int = '0'.repeat(minInt - int.length) + int;
    return [int, frac];
  }

  // ---- NumberFormat ----------------------------------------------------

  const CURRENCY = {
    USD: ['$', '$', 'US dollar', 'US dollars'], EUR: ['€', '€', 'euro', 'euros'],
    GBP: ['£', '£', 'British pound', 'British pounds'], JPY: ['¥', '¥', 'Japanese yen', 'Japanese yen'],
    CNY: ['CN¥', '¥', 'Chinese yuan', 'Chinese yuan'], INR: ['₹', '₹', 'Indian rupee', 'Indian rupees'],
    CAD: ['CA$', '$', 'Canadian dollar', 'Canadian dollars'], AUD: ['A$', '$', 'Australian dollar', 'Australian dollars'],
    KRW: ['₩', '₩', 'South Korean won', 'South Korean won'], BRL: ['R$', 'R$', 'Brazilian real', 'Brazilian reals'],
    MXN: ['MX$', '$', 'Mexican peso', 'Mexican pesos'], CHF: ['CHF', 'CHF', 'Swiss franc', 'Swiss francs'],
    SEK: ['SEK', 'kr', 'Swedish krona', 'Swedish kronor'], NOK: ['NOK', 'kr', 'Norwegian krone', 'Norwegian kroner'],
    DKK: ['DKK', 'kr', 'Danish krone', 'Danish kroner'], PLN: ['PLN', 'zł', 'Polish zloty', 'Polish zlotys'],
    CZK: ['CZK', 'Kč', 'Czech koruna', 'Czech korunas'],
  };
  const NO_MINOR = new Set(['JPY', 'KRW', 'CLP', 'ISK', 'VND', 'HUF', 'TWD', 'UGX', 'PYG', 'XAF', 'XOF']);
  // unit: [short one, short other, narrow, long one, long other, "per" form]
  const UNITS = {
    bit: ['bit', 'bit', 'bit', 'bit', 'bits'], byte: ['byte', 'byte', 'B', 'byte', 'bytes'],
    kilobit: ['kb', 'kb', 'kb', 'kilobit', 'kilobits'], kilobyte: ['kB', 'kB', 'kB', 'kilobyte', 'kilobytes'],
    megabit: ['Mb', 'Mb', 'Mb', 'megabit', 'megabits'], megabyte: ['MB', 'MB', 'MB', 'megabyte', 'megabytes'],
    gigabit: ['Gb', 'Gb', 'Gb', 'gigabit', 'gigabits'], gigabyte: ['GB', 'GB', 'GB', 'gigabyte', 'gigabytes'],
    terabit: ['Tb', 'Tb', 'Tb', 'terabit', 'terabits'], terabyte: ['TB', 'TB', 'TB', 'terabyte', 'terabytes'],
    petabyte: ['PB', 'PB', 'PB', 'petabyte', 'petabytes'],
    nanosecond: ['ns', 'ns', 'ns', 'nanosecond', 'nanoseconds', 'ns'],
    microsecond: ['μs', 'μs', 'μs', 'microsecond', 'microseconds', 'μs'],
    millisecond: ['ms', 'ms', 'ms', 'millisecond', 'milliseconds', 'ms'],
    second: ['sec', 'sec', 's', 'second', 'seconds', 's'], minute: ['min', 'min', 'm', 'minute', 'minutes', 'min'],
    hour: ['hr', 'hr', 'h', 'hour', 'hours', 'h'], day: ['day', 'days', 'd', 'day', 'days', 'd'],
    week: ['wk', 'wks', 'w', 'week', 'weeks', 'w'], month: ['mth', 'mths', 'm', 'month', 'months', 'm'],
    year: ['yr', 'yrs', 'y', 'year', 'years', 'y'], percent: ['%', '%', '%', 'percent', 'percent'],
    celsius: ['°C', '°C', '°C', 'degree Celsius', 'degrees Celsius'],
    fahrenheit: ['°F', '°F', '°', 'degree Fahrenheit', 'degrees Fahrenheit'],
    meter: ['m', 'm', 'm', 'meter', 'meters'], kilometer: ['km', 'km', 'km', 'kilometer', 'kilometers'],
    centimeter: ['cm', 'cm', 'cm', 'centimeter', 'centimeters'], millimeter: ['mm', 'mm', 'mm', 'millimeter', 'millimeters'],
    liter: ['L', 'L', 'L', 'liter', 'liters'], gram: ['g', 'g', 'g', 'gram', 'grams'],
    kilogram: ['kg', 'kg', 'kg', 'kilogram', 'kilograms'],
  };
  const GLUED = new Set(['percent', 'celsius', 'fahrenheit']);
  const COMPACT = [['K', ' thousand'], ['M', ' million'], ['B', ' billion'], ['T', ' trillion']];

  class NumberFormat {
    #o;
    constructor(locales_, options_) {
      const who = 'Intl.NumberFormat';
      locales(locales_, who);
      const o = options(options_);
      const style = pick(o, 'style', ['decimal', 'percent', 'currency', 'unit'], 'decimal', who);
      const r = { locale: LOCALE, numberingSystem: 'latn', style };
      if (style === 'currency') {
        if (o.currency === undefined) throw new TypeError(`${who}: style "currency" needs a currency, e.g. { style: "currency", currency: "USD" }`);
        const c = String(o.currency);
        if (!/^[A-Za-z]{3}$/.test(c)) throw new RangeError(`${who}: currency "${c}" is not a three-letter ISO 4217 code`);
        r.currency = c.toUpperCase();
        r.currencyDisplay = pick(o, 'currencyDisplay', ['symbol', 'narrowSymbol', 'code', 'name'], 'symbol', who);
        r.currencySign = pick(o, 'currencySign', ['standard', 'accounting'], 'standard', who);
      }
      if (style === 'unit') {
        if (o.unit === undefined) throw new TypeError(`${who}: style "unit" needs a unit, e.g. { style: "unit", unit: "gigabyte" }`);
        const u = String(o.unit);
        const [a, b, extra] = u.split('-per-');
        if (!(a in UNITS) || (b !== undefined && !(b in UNITS)) || extra !== undefined) {
          throw new RangeError(`${who}: unit "${u}" is not known here; known: ${Object.keys(UNITS).join(', ')}, and "A-per-B" of two of them`);
        }
        r.unit = u;
        r.unitDisplay = pick(o, 'unitDisplay', ['short', 'long', 'narrow'], 'short', who);
      }
      r.minimumIntegerDigits = digits(o, 'minimumIntegerDigits', 1, 21, 1, who);
      const minor = style === 'currency' ? (NO_MINOR.has(r.currency) ? 0 : 2) : 0;
      const notation = pick(o, 'notation', ['standard', 'scientific', 'engineering', 'compact'], 'standard', who);
      const sig = o.minimumSignificantDigits !== undefined || o.maximumSignificantDigits !== undefined;
      const frac = o.minimumFractionDigits !== undefined || o.maximumFractionDigits !== undefined;
      if (sig) {
        r.minimumSignificantDigits = digits(o, 'minimumSignificantDigits', 1, 21, 1, who);
        r.maximumSignificantDigits = digits(o, 'maximumSignificantDigits', r.minimumSignificantDigits, 21, 21, who);
      } else if (frac || notation !== 'compact') {
        const defMax = style === 'currency' ? minor : style === 'percent' ? 0 : 3;
        const min = digits(o, 'minimumFractionDigits', 0, 100, undefined, who);
        let max = digits(o, 'maximumFractionDigits', 0, 100, undefined, who);
        if (min !== undefined && max !== undefined && max < min) {
          throw new RangeError(`${who}: maximumFractionDigits (${max}) is less than minimumFractionDigits (${min})`);
        }
        r.minimumFractionDigits = min !== undefined ? min : Math.min(minor, max !== undefined ? max : minor);
        r.maximumFractionDigits = max !== undefined ? max : Math.max(defMax, r.minimumFractionDigits);
      }
      const grouping = o.useGrouping;
      r.useGrouping = grouping === undefined ? (notation === 'compact' ? 'min2' : 'auto')
        : grouping === false || grouping === 'false' ? false
          : grouping === true || grouping === 'true' ? 'always'
            : pick(o, 'useGrouping', ['always', 'auto', 'min2'], 'auto', who);
      r.notation = notation;
      if (notation === 'compact') r.compactDisplay = pick(o, 'compactDisplay', ['short', 'long'], 'short', who);
      r.signDisplay = pick(o, 'signDisplay', ['auto', 'never', 'always', 'exceptZero', 'negative'], 'auto', who);
      r.roundingMode = pick(o, 'roundingMode', ['ceil', 'floor', 'expand', 'trunc', 'halfCeil', 'halfFloor', 'halfExpand', 'halfTrunc', 'halfEven'], 'halfExpand', who);
      r.trailingZeroDisplay = pick(o, 'trailingZeroDisplay', ['auto', 'stripIfInteger'], 'auto', who);
      // What is not done here is refused, not ignored.
      const only = (name, value) => {
        if (o[name] !== undefined && String(o[name]) !== String(value)) {
          throw new RangeError(`${who}: ${name} ${JSON.stringify(String(o[name]))} is not available in the sandbox (only ${JSON.stringify(value)}); round with Math.round and friends first`);
        }
      };
      only('roundingIncrement', 1);
      only('roundingPriority', 'auto');
      only('numberingSystem', 'latn');
      this.#o = r;
    }
    static supportedLocalesOf(l) { return supported(l, 'Intl.NumberFormat.supportedLocalesOf'); }
    resolvedOptions() { return Object.assign({}, this.#o); }
    get format() {
      const f = (n) => this.formatToParts(n).map((p) => p.value).join('');
      Object.defineProperty(this, 'format', { value: f, configurable: true });
      return f;
    }
    formatRange(a, b) { return `${this.format(a)}–${this.format(b)}`; }
    formatToParts(value) {
      const o = this.#o;
      const n = typeof value === 'bigint' ? value : Number(value);
      const parts = [];
      if (typeof n === 'number' && Number.isNaN(n)) return this.#wrap([{ type: 'nan', value: 'NaN' }], false, true);
      const negative = typeof n === 'bigint' ? n < 0n : n < 0 || Object.is(n, -0);
      if (typeof n === 'number' && !Number.isFinite(n)) return this.#wrap([{ type: 'infinity', value: '∞' }], negative, false);
      let d = decimal(n);
      if (o.style === 'percent') d = { negative: d.negative, digits: d.digits, point: d.digits === '' ? 0 : d.point + 2 };
      let exponent = 0, compact = null;
      const scientific = o.notation === 'scientific' || o.notation === 'engineering';
      if (scientific) {
        if (d.digits !== '') {
          exponent = d.point - 1;
          if (o.notation === 'engineering') exponent = Math.floor(exponent / 3) * 3;
          d = { negative: d.negative, digits: d.digits, point: d.point - exponent };
        }
      }
      const mode = o.roundingMode;
      const rounded = (x) => {
        if (o.maximumSignificantDigits !== undefined) return round(x, o.maximumSignificantDigits, mode);
        if (o.maximumFractionDigits !== undefined) return round(x, x.point + o.maximumFractionDigits, mode);
        // compact's default: whole numbers from two integer digits, else two significant digits
        return x.point >= 2 ? round(x, x.point, mode) : round(x, 2, mode);
      };
      if (o.notation === 'compact' && d.digits !== '') {
        let level = Math.max(0, Math.min(Math.floor((d.point - 1) / 3), COMPACT.length));
        let scaled = rounded({ negative: d.negative, digits: d.digits, point: d.point - level * 3 });
        // rounding carried into the next unit: 999.5 is 1K, 999,999 is 1M
        if (scaled.point > 3 && level < COMPACT.length) {
          level += 1;
          scaled = rounded({ negative: d.negative, digits: d.digits, point: d.point - level * 3 });
        }
        d = scaled;
        if (level > 0) compact = COMPACT[level - 1][o.compactDisplay === 'long' ? 1 : 0];
      } else d = rounded(d);
      if (scientific && d.digits !== '' && d.point - 1 > (o.notation === 'engineering' ? 2 : 0)) {
        // rounding carried into another digit: 9.99E2 → 1E3
        const step = o.notation === 'engineering' ? 3 : 1;
        exponent += step;
        d = { negative: d.negative, digits: d.digits, point: d.point - step };
      }
      let [int, frac] = split(d, o.minimumIntegerDigits, o.minimumFractionDigits !== undefined ? o.minimumFractionDigits : 0, o.minimumSignificantDigits || 0);
      if (o.trailingZeroDisplay === 'stripIfInteger' && /^0*$/.test(frac)) frac = '';
      const group = o.useGrouping === 'always' || o.useGrouping === 'auto' ? int.length > 3
        : o.useGrouping === 'min2' ? int.length > 4 : false;
      if (group) {
        const first = int.length % 3 || 3;
        parts.push({ type: 'integer', value: int.slice(0, first) });
        for (let i = first; i < int.length; i += 3) {
          parts.push({ type: 'group', value: ',' }, { type: 'integer', value: int.slice(i, i + 3) });
        }
      } else parts.push({ type: 'integer', value: int });
      if (frac !== '') parts.push({ type: 'decimal', value: '.' }, { type: 'fraction', value: frac });
      if (scientific) {
        parts.push({ type: 'exponentSeparator', value: 'E' });
        if (exponent < 0) parts.push({ type: 'exponentMinusSign', value: '-' });
        parts.push({ type: 'exponentInteger', value: String(Math.abs(exponent)) });
      }
      if (compact !== null) parts.push({ type: 'compact', value: compact.trim() });
      return this.#wrap(parts, negative, d.digits === '', compact);
    }
    #wrap(parts, negative, zero, compact) {
      const o = this.#o;
      const sign = o.signDisplay === 'never' ? ''
        : o.signDisplay === 'always' ? (negative ? '-' : '+')
          : o.signDisplay === 'exceptZero' ? (zero ? '' : negative ? '-' : '+')
            : o.signDisplay === 'negative' ? (negative && !zero ? '-' : '')
              : negative ? '-' : '';
      const one = parts.length === 1 && parts[0].value === '1';
      let out = parts;
      if (compact && out[out.length - 1].type === 'compact' && o.compactDisplay === 'long') {
        out = out.slice(0, -1).concat([{ type: 'literal', value: ' ' }, out[out.length - 1]]);
      }
      if (o.style === 'percent') out = out.concat([{ type: 'percentSign', value: '%' }]);
      if (o.style === 'currency') {
        const known = CURRENCY[o.currency];
        const accounting = o.currencySign === 'accounting' && sign === '-';
        if (o.currencyDisplay === 'name') {
          const name = known ? known[one ? 2 : 3] : o.currency;
          out = out.concat([{ type: 'literal', value: ' ' }, { type: 'currency', value: name }]);
          return sign ? [{ type: sign === '-' ? 'minusSign' : 'plusSign', value: sign }].concat(out) : out;
        }
        const symbol = o.currencyDisplay === 'code' || !known ? o.currency
          : known[o.currencyDisplay === 'narrowSymbol' ? 1 : 0];
        const spaced = /[A-Za-z]$/.test(symbol);
        out = [{ type: 'currency', value: symbol }].concat(spaced ? [{ type: 'literal', value: '\u00a0' }] : [], out);
        if (accounting) return [{ type: 'literal', value: '(' }].concat(out, [{ type: 'literal', value: ')' }]);
      }
      if (o.style === 'unit') {
        const [a, b] = o.unit.split('-per-');
        const forms = UNITS[a];
        const width = o.unitDisplay;
        let label, glue = ' ';
        if (width === 'long') label = forms[one ? 3 : 4] + (b ? ` per ${UNITS[b][3]}` : '');
        else if (width === 'narrow') { label = forms[2] + (b ? `/${UNITS[b][5] || UNITS[b][2]}` : ''); glue = ''; }
        else label = forms[one ? 0 : 1] + (b ? `/${UNITS[b][5] || UNITS[b][0]}` : '');
        if (width !== 'long' && GLUED.has(a) && !b) glue = '';
        out = out.concat(glue ? [{ type: 'literal', value: glue }, { type: 'unit', value: label }] : [{ type: 'unit', value: label }]);
      }
      if (sign) out = [{ type: sign === '-' ? 'minusSign' : 'plusSign', value: sign }].concat(out);
      return out;
    }
  }

  // ---- DateTimeFormat ----------------------------------------------------

  const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'];
  const DAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
  const FIELDS = ['weekday', 'era', 'year', 'month', 'day', 'dayPeriod', 'hour', 'minute', 'second', 'fractionalSecondDigits', 'timeZoneName'];
  const TEXT = ['narrow', 'short', 'long'];
  const NUM = ['numeric', '2-digit'];

  function zone(input, who) {
    if (input === undefined) return ['UTC', 0];
    const z = String(input);
    if (/^(etc\/)?(utc|gmt|uct|zulu|universal|etc\/universal)$/i.test(z) || /^etc\/(gmt|utc)[+-]?0$/i.test(z)) return ['UTC', 0];
    const m = /^([+-])(\d{2}):?(\d{2})$/.exec(z);
    if (m && Number(m[2]) <= 23 && Number(m[3]) <= 59) {
      return [`${m[1]}${m[2]}:${m[3]}`, (m[1] === '-' ? -1 : 1) * (Number(m[2]) * 60 + Number(m[3]))];
    }
    throw new RangeError(`${who}: time zone "${z}" is not known in the sandbox, which has no time-zone data; use "UTC" or a fixed offset such as "+01:00"`);
  }

  class DateTimeFormat {
    #o;
    #offset;
    constructor(locales_, options_, required = 'any', defaults = 'date') {
      const who = 'Intl.DateTimeFormat';
      locales(locales_, who);
      const o = options(options_);
      const [timeZone, offset] = zone(o.timeZone, who);
      this.#offset = offset;
      const r = { locale: LOCALE, calendar: 'gregory', numberingSystem: 'latn', timeZone };
      const hour12 = o.hour12 === undefined ? undefined : Boolean(o.hour12);
      const cycle = o.hourCycle === undefined ? undefined : pick(o, 'hourCycle', ['h11', 'h12', 'h23', 'h24'], 'h12', who);
      const dateStyle = o.dateStyle === undefined ? undefined : pick(o, 'dateStyle', ['full', 'long', 'medium', 'short'], 'short', who);
      const timeStyle = o.timeStyle === undefined ? undefined : pick(o, 'timeStyle', ['full', 'long', 'medium', 'short'], 'short', who);
      const f = {};
      f.weekday = o.weekday === undefined ? undefined : pick(o, 'weekday', TEXT, 'long', who);
      f.era = o.era === undefined ? undefined : pick(o, 'era', TEXT, 'short', who);
      f.year = o.year === undefined ? undefined : pick(o, 'year', NUM, 'numeric', who);
      f.month = o.month === undefined ? undefined : pick(o, 'month', NUM.concat(TEXT), 'numeric', who);
      f.day = o.day === undefined ? undefined : pick(o, 'day', NUM, 'numeric', who);
      f.hour = o.hour === undefined ? undefined : pick(o, 'hour', NUM, 'numeric', who);
      f.minute = o.minute === undefined ? undefined : pick(o, 'minute', NUM, 'numeric', who);
      f.second = o.second === undefined ? undefined : pick(o, 'second', NUM, 'numeric', who);
      f.fractionalSecondDigits = o.fractionalSecondDigits === undefined ? undefined : digits(o, 'fractionalSecondDigits', 1, 3, 3, who);
      f.timeZoneName = o.timeZoneName === undefined ? undefined : pick(o, 'timeZoneName', ['short', 'long', 'shortOffset', 'longOffset', 'shortGeneric', 'longGeneric'], 'short', who);
      const explicit = FIELDS.some((k) => f[k] !== undefined && k !== 'timeZoneName');
      const dateField = ['weekday', 'year', 'month', 'day'].some((k) => f[k] !== undefined);
      const timeField = ['hour', 'minute', 'second', 'fractionalSecondDigits'].some((k) => f[k] !== undefined);
      const needDefaults = !((required !== 'time' && dateField) || (required !== 'date' && timeField));
      if ((dateStyle || timeStyle) && explicit) {
        throw new TypeError(`${who}: dateStyle and timeStyle cannot be combined with ${FIELDS.filter((k) => f[k] !== undefined).join(', ')}`);
      }
      if (dateStyle || timeStyle) {
        if (dateStyle) r.dateStyle = dateStyle;
        if (timeStyle) r.timeStyle = timeStyle;
      } else {
        if (needDefaults) {
          if (defaults === 'date' || defaults === 'all') { f.year = 'numeric'; f.month = 'numeric'; f.day = 'numeric'; }
          if (defaults === 'time' || defaults === 'all') { f.hour = 'numeric'; f.minute = 'numeric'; f.second = 'numeric'; }
        }
      }
      const hasHour = f.hour !== undefined || timeStyle !== undefined;
      if (hasHour) {
        r.hourCycle = hour12 === true ? 'h12' : hour12 === false ? 'h23' : cycle || 'h12';
        r.hour12 = r.hourCycle === 'h11' || r.hourCycle === 'h12';
      }
      for (const k of FIELDS) {
        if (f[k] === undefined) continue;
        let v = f[k];
        // en-US writes 24-hour times with two-digit hours
        if (k === 'hour' && !r.hour12) v = '2-digit';
        if (k === 'minute' && f.hour !== undefined) v = '2-digit';
        if (k === 'second' && (f.hour !== undefined || f.minute !== undefined)) v = '2-digit';
        r[k] = v;
      }
      this.#o = r;
    }
    static supportedLocalesOf(l) { return supported(l, 'Intl.DateTimeFormat.supportedLocalesOf'); }
    resolvedOptions() { return Object.assign({}, this.#o); }
    get format() {
      const f = (date) => this.formatToParts(date).map((p) => p.value).join('');
      Object.defineProperty(this, 'format', { value: f, configurable: true });
      return f;
    }
    formatRange(a, b) { return `${this.format(a)} – ${this.format(b)}`; }
    formatToParts(date) {
      const t = date === undefined ? Date.now() : date instanceof Date ? date.getTime() : Number(date);
      if (!Number.isFinite(t) || Math.abs(t) > 8.64e15) throw new RangeError('Intl.DateTimeFormat: invalid time value (the date is "Invalid Date")');
      const o = this.#o;
      const at = new Date(t + this.#offset * 60000);
      const c = {
        year: at.getUTCFullYear(), month: at.getUTCMonth(), day: at.getUTCDate(), weekday: at.getUTCDay(),
        hour: at.getUTCHours(), minute: at.getUTCMinutes(), second: at.getUTCSeconds(), ms: at.getUTCMilliseconds(),
      };
      const pad = (n, w = 2) => String(n).padStart(w, '0');
      const L = (value) => ({ type: 'literal', value });
      const P = (type, value) => ({ type, value: String(value) });
      const zoneName = (style) => {
        if (this.#offset === 0) return style === 'long' ? 'Coordinated Universal Time' : style === 'shortOffset' || style === 'longOffset' ? 'GMT' : 'UTC';
        const m = Math.abs(this.#offset), s = this.#offset < 0 ? '-' : '+';
        if (style === 'longOffset') return `GMT${s}${pad(Math.floor(m / 60))}:${pad(m % 60)}`;
        return `GMT${s}${Math.floor(m / 60)}${m % 60 ? ':' + pad(m % 60) : ''}`;
      };
      const dateParts = (style) => {
        if (style === 'short') return [P('month', c.month + 1), L('/'), P('day', c.day), L('/'), P('year', pad(c.year % 100))];
        const md = [P('month', style === 'medium' ? MONTHS[c.month].slice(0, 3) : MONTHS[c.month]), L(' '), P('day', c.day), L(', '), P('year', c.year)];
        return style === 'full' ? [P('weekday', DAYS[c.weekday]), L(', ')].concat(md) : md;
      };
      const timeParts = (f) => {
        const h12 = o.hour12;
        let h = c.hour;
        if (o.hourCycle === 'h12') h = h % 12 || 12;
        else if (o.hourCycle === 'h11') h = h % 12;
        else if (o.hourCycle === 'h24') h = h || 24;
        const out = [P('hour', f.hour === '2-digit' ? pad(h) : h)];
        if (f.minute) out.push(L(':'), P('minute', pad(c.minute)));
        if (f.second) out.push(L(':'), P('second', pad(c.second)));
        if (f.fractionalSecondDigits) out.push(L('.'), P('fractionalSecond', pad(c.ms, 3).slice(0, f.fractionalSecondDigits)));
        if (h12) out.push(L(' '), P('dayPeriod', c.hour < 12 ? 'AM' : 'PM'));
        if (f.timeZoneName) out.push(L(' '), P('timeZoneName', zoneName(f.timeZoneName)));
        return out;
      };
      if (o.dateStyle || o.timeStyle) {
        const d = o.dateStyle ? dateParts(o.dateStyle) : [];
        const ts = o.timeStyle;
        const t = ts ? timeParts({ hour: 'numeric', minute: true, second: ts !== 'short', timeZoneName: ts === 'full' ? 'long' : ts === 'long' ? 'short' : undefined }) : [];
        if (d.length && t.length) return d.concat([L(o.dateStyle === 'full' || o.dateStyle === 'long' ? ' at ' : ', ')], t);
        return d.concat(t);
      }
      const shown = [];
      const text = o.month === 'long' || o.month === 'short' || o.month === 'narrow';
      const monthName = o.month === 'long' ? MONTHS[c.month] : o.month === 'short' ? MONTHS[c.month].slice(0, 3) : MONTHS[c.month][0];
      const dayName = o.weekday === 'long' ? DAYS[c.weekday] : o.weekday === 'short' ? DAYS[c.weekday].slice(0, 3) : o.weekday ? DAYS[c.weekday][0] : null;
      const year = o.year === '2-digit' ? pad(c.year % 100) : o.year ? String(c.year) : null;
      const day = o.day === '2-digit' ? pad(c.day) : o.day ? String(c.day) : null;
      if (text) {
        shown.push(P('month', monthName));
        if (day) shown.push(L(' '), P('day', day));
        if (year) shown.push(L(day ? ', ' : ' '), P('year', year));
      } else {
        const pieces = [];
        if (o.month) pieces.push(P('month', o.month === '2-digit' ? pad(c.month + 1) : c.month + 1));
        if (day) pieces.push(P('day', day));
        if (year) pieces.push(P('year', year));
        pieces.forEach((p, i) => { if (i > 0) shown.push(L('/')); shown.push(p); });
      }
      if (dayName) {
        if (shown.length) shown.unshift(P('weekday', dayName), L(', '));
        else shown.push(P('weekday', dayName));
      }
      const time = o.hour !== undefined || o.minute !== undefined || o.second !== undefined
        ? timeParts({ hour: o.hour, minute: o.minute, second: o.second, fractionalSecondDigits: o.fractionalSecondDigits, timeZoneName: o.timeZoneName })
        : o.timeZoneName ? [P('timeZoneName', zoneName(o.timeZoneName))] : [];
      if (o.hour === undefined && (o.minute !== undefined || o.second !== undefined)) {
        // minutes or seconds alone: no hour in front
        time.splice(0, 2);
      }
      if (shown.length && time.length) return shown.concat([L(', ')], time);
      return shown.concat(time);
    }
  }

  // ---- Collator, PluralRules, ListFormat, RelativeTimeFormat ------------

  class Collator {
    #o;
    constructor(locales_, options_) {
      const who = 'Intl.Collator';
      locales(locales_, who);
      const o = options(options_);
      const usage = pick(o, 'usage', ['sort', 'search'], 'sort', who);
      this.#o = {
        locale: LOCALE, usage,
        sensitivity: pick(o, 'sensitivity', ['base', 'accent', 'case', 'variant'], 'variant', who),
        ignorePunctuation: bool(o, 'ignorePunctuation', false),
        collation: 'default', numeric: bool(o, 'numeric', false),
        caseFirst: pick(o, 'caseFirst', ['upper', 'lower', 'false'], 'false', who),
      };
    }
    static supportedLocalesOf(l) { return supported(l, 'Intl.Collator.supportedLocalesOf'); }
    resolvedOptions() { return Object.assign({}, this.#o); }
    get compare() {
      const o = this.#o;
      const level = { base: 1, accent: 2, case: 3, variant: 4 }[o.sensitivity];
      const f = (a, b) => native.collate(String(a), String(b), level, o.numeric, o.ignorePunctuation, o.caseFirst === 'upper');
      Object.defineProperty(this, 'compare', { value: f, configurable: true });
      return f;
    }
  }

  class PluralRules {
    #o;
    constructor(locales_, options_) {
      const who = 'Intl.PluralRules';
      locales(locales_, who);
      const o = options(options_);
      this.#o = { locale: LOCALE, type: pick(o, 'type', ['cardinal', 'ordinal'], 'cardinal', who) };
      this.#o.format = new NumberFormat(undefined, Object.assign({}, o, { style: 'decimal' }));
    }
    static supportedLocalesOf(l) { return supported(l, 'Intl.PluralRules.supportedLocalesOf'); }
    resolvedOptions() {
      const r = this.#o.format.resolvedOptions();
      return Object.assign(r, { locale: LOCALE, type: this.#o.type, pluralCategories: this.#o.type === 'ordinal' ? ['few', 'one', 'two', 'other'] : ['one', 'other'] });
    }
    select(n) {
      if (!Number.isFinite(Number(n))) return 'other';
      const text = this.#o.format.format(Math.abs(Number(n))).replace(/,/g, '');
      if (this.#o.type === 'cardinal') return text === '1' ? 'one' : 'other';
      if (text.includes('.')) return 'other';
      const i = BigInt(text);
      const ten = i % 10n, hundred = i % 100n;
      if (ten === 1n && hundred !== 11n) return 'one';
      if (ten === 2n && hundred !== 12n) return 'two';
      if (ten === 3n && hundred !== 13n) return 'few';
      return 'other';
    }
  }

  class ListFormat {
    #o;
    constructor(locales_, options_) {
      const who = 'Intl.ListFormat';
      locales(locales_, who);
      const o = options(options_);
      this.#o = {
        locale: LOCALE,
        type: pick(o, 'type', ['conjunction', 'disjunction', 'unit'], 'conjunction', who),
        style: pick(o, 'style', ['long', 'short', 'narrow'], 'long', who),
      };
    }
    static supportedLocalesOf(l) { return supported(l, 'Intl.ListFormat.supportedLocalesOf'); }
    resolvedOptions() { return Object.assign({}, this.#o); }
    format(list) { return this.formatToParts(list).map((p) => p.value).join(''); }
    formatToParts(list) {
      const items = Array.from(list === undefined ? [] : list, (x) => {
        if (typeof x !== 'string') throw new TypeError('Intl.ListFormat: every item must be a string');
        return x;
      });
      const { type, style } = this.#o;
      const sep = type === 'unit' && style === 'narrow' ? ' ' : ', ';
      const word = type === 'disjunction' ? 'or' : type === 'unit' ? null : style === 'long' ? 'and' : style === 'short' ? '&' : null;
      const out = [];
      items.forEach((x, i) => {
        if (i > 0) {
          const last = i === items.length - 1;
          const value = !last || !word ? sep : items.length === 2 ? ` ${word} ` : `, ${word} `;
          out.push({ type: 'literal', value });
        }
        out.push({ type: 'element', value: x });
      });
      return out;
    }
  }

  const RELATIVE = {
    year: ['year', 'yr.', 'last year', 'this year', 'next year'],
    quarter: ['quarter', 'qtr.', 'last quarter', 'this quarter', 'next quarter'],
    month: ['month', 'mo.', 'last month', 'this month', 'next month'],
    week: ['week', 'wk.', 'last week', 'this week', 'next week'],
    day: ['day', 'day', 'yesterday', 'today', 'tomorrow'],
    hour: ['hour', 'hr.', null, 'this hour', null],
    minute: ['minute', 'min.', null, 'this minute', null],
    second: ['second', 'sec.', null, 'now', null],
  };

  class RelativeTimeFormat {
    #o;
    constructor(locales_, options_) {
      const who = 'Intl.RelativeTimeFormat';
      locales(locales_, who);
      const o = options(options_);
      this.#o = {
        locale: LOCALE, numberingSystem: 'latn',
        style: pick(o, 'style', ['long', 'short', 'narrow'], 'long', who),
        numeric: pick(o, 'numeric', ['always', 'auto'], 'always', who),
      };
    }
    static supportedLocalesOf(l) { return supported(l, 'Intl.RelativeTimeFormat.supportedLocalesOf'); }
    resolvedOptions() { return Object.assign({}, this.#o); }
    format(value, unit) {
      const n = Number(value);
      if (!Number.isFinite(n)) throw new RangeError('Intl.RelativeTimeFormat: the value must be a finite number');
      const u = String(unit).replace(/s$/, '');
      const names = RELATIVE[u];
      if (!names) throw new RangeError(`Intl.RelativeTimeFormat: unit "${String(unit)}" is not one of ${Object.keys(RELATIVE).join(', ')}`);
      if (this.#o.numeric === 'auto' && (n === -1 || n === 0 || n === 1) && names[n + 3] !== null) return names[n + 3];
      const text = new NumberFormat().format(Math.abs(n));
      const past = n < 0 || Object.is(n, -0);
      let label;
      if (this.#o.style === 'long' || u === 'day') label = names[0] + (text === '1' ? '' : 's');
      else label = names[1];
      return past ? `${text} ${label} ago` : `in ${text} ${label}`;
    }
  }

  const Intl = {};
  define(Intl, 'NumberFormat', NumberFormat);
  define(Intl, 'DateTimeFormat', function DateTimeFormat_(l, o) { return new DateTimeFormat(l, o, 'any', 'date'); });
  Object.defineProperty(Intl.DateTimeFormat, 'prototype', { value: DateTimeFormat.prototype });
  define(Intl.DateTimeFormat, 'supportedLocalesOf', DateTimeFormat.supportedLocalesOf);
  define(Intl, 'Collator', Collator);
  define(Intl, 'PluralRules', PluralRules);
  define(Intl, 'ListFormat', ListFormat);
  define(Intl, 'RelativeTimeFormat', RelativeTimeFormat);
  define(Intl, 'getCanonicalLocales', (l) => canonical(l, 'Intl.getCanonicalLocales'));
  define(Intl, 'supportedValuesOf', (key) => {
    if (key === 'currency') return Object.keys(CURRENCY).sort();
    if (key === 'unit') return Object.keys(UNITS).sort();
    if (key === 'timeZone') return ['UTC'];
    return [];
  });
  Object.defineProperty(Intl, Symbol.toStringTag, { value: 'Intl', configurable: true });
  define(globalThis, 'Intl', Intl);

  // The built-ins' locale methods, formatted the same way.
  let plain = null;
  define(Number.prototype, 'toLocaleString', function toLocaleString(l, o) {
    const n = Number.prototype.valueOf.call(this);
    if (l === undefined && o === undefined) return (plain || (plain = new NumberFormat())).format(n);
    return new NumberFormat(l, o).format(n);
  });
  define(BigInt.prototype, 'toLocaleString', function toLocaleString(l, o) {
    return new NumberFormat(l, o).format(BigInt.prototype.valueOf.call(this));
  });
  const dated = (kind) => function (l, o) {
    const t = Date.prototype.getTime.call(this);
    if (Number.isNaN(t)) return 'Invalid Date';
    const opts = options(o);
    if (kind === 'date' && opts.timeStyle !== undefined) throw new TypeError('toLocaleDateString: timeStyle has no date to go with; use toLocaleString');
    if (kind === 'time' && opts.dateStyle !== undefined) throw new TypeError('toLocaleTimeString: dateStyle has no time to go with; use toLocaleString');
    return new DateTimeFormat(l, opts, kind === 'all' ? 'any' : kind, kind).format(t);
  };
  define(Date.prototype, 'toLocaleString', dated('all'));
  define(Date.prototype, 'toLocaleDateString', dated('date'));
  define(Date.prototype, 'toLocaleTimeString', dated('time'));
  let collator = null;
  define(String.prototype, 'localeCompare', function localeCompare(that, l, o) {
    if (this === null || this === undefined) throw new TypeError('String.prototype.localeCompare called on null or undefined');
    const c = l === undefined && o === undefined ? (collator || (collator = new Collator())) : new Collator(l, o);
    return c.compare(String(this), String(that));
  });
  define(Array.prototype, 'toLocaleString', function toLocaleString(l, o) {
    return Array.from(this, (x) => (x === null || x === undefined ? '' : x.toLocaleString(l, o))).join(',');
  });
})
