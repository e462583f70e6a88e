# Usage: zsh -f capture_completion.zsh 'SETUP' 'COMMAND LINE'
# Runs SETUP (e.g. an `fpath+=(…)` line) in an interactive zsh on a pseudo-terminal, then
# compinit, types COMMAND LINE and a Tab, and prints each completion zsh offers, one a
# line ("word -- description"). The technique (compadd wrapped to report its matches,
# NUL lines around the listing) is that of zsh-capture-completion by Valodim (MIT).
zmodload zsh/zpty || exit 3
setopt rcquotes
local setup=$(mktemp) line
cat > $setup <<'SETUP'
PROMPT=
autoload -Uz compinit
compinit -u -D
bindkey '^M' undefined
bindkey '^J' undefined
bindkey '^I' complete-word
null-line () { echo -E - $'\0' }
compprefuncs=( null-line )
comppostfuncs=( null-line exit )
zstyle ':completion:*' list-grouped false
zstyle ':completion:*' insert-tab false
zstyle ':completion:*' list-separator ''
compadd () {
    if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then
        builtin compadd "$@"
        return $?
    fi
    typeset -a __hits __dscr __tmp
    if (( $@[(I)-d] )); then
        __tmp=${@[$[${@[(i)-d]}+1]]}
        if [[ $__tmp == \(* ]]; then eval "__dscr=$__tmp"; else __dscr=( "${(@P)__tmp}" ); fi
    fi
    builtin compadd -A __hits -D __dscr "$@"
    [[ -n $__hits ]] || return
    local i
    for i in {1..$#__hits}; do
        (( $#__dscr >= $i )) && echo -E - "$__hits[$i] -- ${${__dscr[$i]}##$__hits[$i] #}" || echo -E - "$__hits[$i]"
    done
}
echo ok
SETUP
zpty z zsh -f -i
zpty -w z "$1"
zpty -w z "source $setup"
repeat 8; do
  zpty -r z line
  [[ $line == ok* ]] && break
done
zpty -w z "$2"$'\t'
integer tog=0
while zpty -r z; do :; done | while IFS= read -r line; do
  if [[ $line == *$'\0\r' ]]; then
    (( tog++ )) && break || continue
  fi
  (( tog )) && echo -E - "${line%$'\r'}"
done
zpty -d z
rm -f $setup
